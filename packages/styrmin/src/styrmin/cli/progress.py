"""Waiting for a task: its steps live on stderr, then the whole task on stdout, and the exit code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from styrmin._enums import TaskStatus
from styrmin.cli._common import EXIT_FAILED, poll_interval
from styrmin.cli.output import OutputFormat, emit, is_machine, make_console
from styrmin.cli.render import change_line, progress_lines, progress_table, task_detail, waiting_message
from styrmin.errors import WaitTimeoutError

if TYPE_CHECKING:
    from styrmin import Client
    from styrmin.models import Change, Task


def wait_live(client: Client, task_id: int, timeout: float | None) -> Task:
    """Poll the task until it ends, showing its steps as they start and end.

    On a terminal the view is redrawn in place; otherwise each change is one line. Either way it goes
    to stderr, so that stdout keeps only the result.
    """
    err = make_console(stderr=True)
    try:
        if err.is_terminal:
            from rich.live import Live

            latest: list[Task] = []

            def view() -> Any:
                return progress_table(latest[-1]) if latest else Text(f"Waiting for task {task_id}…")

            with Live(console=err, get_renderable=view, refresh_per_second=4, transient=True):
                return client.tasks.wait(
                    task_id, on_progress=latest.append, interval=poll_interval(), timeout=timeout
                )

        previous: list[Task] = []

        def report(task: Task) -> None:
            for line in progress_lines(previous[-1] if previous else None, task):
                err.print(line, soft_wrap=True)
            previous[:] = [task]

        return client.tasks.wait(task_id, on_progress=report, interval=poll_interval(), timeout=timeout)
    except KeyboardInterrupt:
        err.print(f"Stopped waiting; task {task_id} goes on. Follow it with: styrminctl tasks wait {task_id}")
        raise
    except WaitTimeoutError as timed_out:
        last: Task | None = timed_out.task
        waits = f" {waiting_message(last)}" if last is not None and waiting_message(last) else ""
        raise WaitTimeoutError(
            f"{timed_out.message}{waits} The task goes on; follow it with: styrminctl tasks wait {task_id}",
            task=last,
        ) from None


def show_task(task: Task, output: OutputFormat, *, fail_when_failed: bool = True) -> None:
    """Print the task as ``tasks get`` does, and exit 1 when it failed (if ``fail_when_failed``)."""
    if is_machine(output):
        emit(task, output)
    else:
        make_console().print(task_detail(task), soft_wrap=True)
    if fail_when_failed and task.status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        raise typer.Exit(EXIT_FAILED)


def follow_changes(
    client: Client,
    action: str,
    changes: Sequence[Change],
    wait: bool,
    timeout: float | None,
    output: OutputFormat,
) -> tuple[list[Any], bool]:
    """Report recorded changes in turn; with ``wait``, follow each one's task to its end.

    For people each change is printed as it goes (with ``wait``, its ended task too). Returns the
    changes as a JSON or YAML document holds them (a waited-for change with its ended Task) and
    whether a task failed or was cancelled: waiting stops at the first such task.
    """
    shown: list[Any] = []
    for change in changes:
        if not wait or change.task is None:
            if not is_machine(output):
                make_console().print(change_line(action, change), soft_wrap=True)
            shown.append(change)
            continue
        if not is_machine(output):
            make_console().print(change_line(action, change, follow_hint=False), soft_wrap=True)
        task = wait_live(client, change.task.id, timeout)
        if not is_machine(output):
            make_console().print(task_detail(task), soft_wrap=True)
        shown.append({"deployment": change.deployment, "task": task})
        if task.status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
            shown += changes[len(shown) :]
            return shown, True
    return shown, False


def finish_change(
    client: Client, action: str, change: Change, wait: bool, timeout: float | None, output: OutputFormat
) -> None:
    """Report a recorded change; with ``wait``, follow its task to the end (exit 1 if it failed)."""
    shown, failed = follow_changes(client, action, [change], wait, timeout, output)
    if is_machine(output):
        emit(shown[0], output)
    if failed:
        raise typer.Exit(EXIT_FAILED)
