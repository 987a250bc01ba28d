"""``styrminctl tasks``: list, show, wait for, retry and cancel tasks."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from styrmin._enums import TaskStatus, TaskType
from styrmin.cli._common import (
    PLAIN_HELP,
    GetOutputOption,
    ListOutputOption,
    OutputOption,
    WaitOption,
    WaitTimeoutOption,
    YesOption,
    complete_deployment,
    complete_task,
    confirm,
    fail,
    handle_errors,
    poll_interval,
    state,
)
from styrmin.cli.output import GetFormat, ListFormat, OutputFormat, emit, emit_names, is_machine, make_console
from styrmin.cli.progress import finish_change, show_task, wait_live
from styrmin.cli.render import task_detail, tasks_table

if TYPE_CHECKING:
    from styrmin import Client, Task

app = typer.Typer(
    rich_markup_mode=PLAIN_HELP, help="Tasks: what each change did, step by step.", no_args_is_help=True
)

TaskArgument = Annotated[
    int, typer.Argument(help="The task's id.", min=1, show_default=False, autocompletion=complete_task)
]


@app.command("list")
@handle_errors
def list_tasks(
    deployment: Annotated[
        str | None,
        typer.Option(
            "--deployment", "-d", help="Only this deployment's.", autocompletion=complete_deployment
        ),
    ] = None,
    type: Annotated[TaskType | None, typer.Option("--type", "-t", help="Only tasks of this type.")] = None,
    status: Annotated[
        TaskStatus | None, typer.Option("--status", help="Only tasks with this status.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-l", help="How many tasks at most.", min=1, max=500)] = 20,
    before: Annotated[
        int | None, typer.Option("--before", help="Only tasks older than this id (the next page).", min=1)
    ] = None,
    output: ListOutputOption = ListFormat.TEXT,
) -> None:
    """List tasks, newest first."""
    with state().client() as client:
        page = client.tasks.list(deployment=deployment, type=type, status=status, limit=limit, before=before)
    if is_machine(output):
        emit(page, output)
        return
    if output == ListFormat.NAME:
        emit_names("task", [str(t.id) for t in page.items])
        return
    console = make_console()
    if not page.items:
        console.print("No tasks.")
        return
    console.print(tasks_table(page.items, wide=output == ListFormat.WIDE))
    if page.next_before is not None:
        console.print(Text(f"More: add --before {page.next_before}", style="dim"), soft_wrap=True)


@app.command()
@handle_errors
def get(task_id: TaskArgument, output: GetOutputOption = GetFormat.TEXT) -> None:
    """Show a task: type, status, who asked, origin, result, then each step with its error, notes, output
    and the tasks it started. Exit code 0 whenever the task could be read, failed or not (`tasks wait`
    exits 1 for a failed task)."""
    with state().client() as client:
        task = client.tasks.get(task_id)
    if output == GetFormat.NAME:
        emit_names("task", [str(task.id)])
        return
    show_task(task, OutputFormat(output), fail_when_failed=False)


@app.command()
@handle_errors
def wait(
    task_id: TaskArgument, timeout: WaitTimeoutOption = None, output: OutputOption = OutputFormat.TEXT
) -> None:
    """Show a task's steps live until it ends, then the task; exit code 1 when it failed."""
    with state().client() as client:
        task = wait_live(client, task_id, timeout)
    show_task(task, output)


@app.command()
@handle_errors
def retry(
    task_id: TaskArgument,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Request a failed task's change again: a new revision and a new task. Only the latest task of its
    type for its deployment can be retried."""
    with state().client() as client:
        change = client.tasks.retry(task_id)
        finish_change(client, f"Retrying task {task_id} of", change, wait, timeout, output)


@app.command()
@handle_errors
def cancel(
    task_id: TaskArgument,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Then wait until its agent has stopped the running action, and show the task."
        ),
    ] = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
    yes: YesOption = False,
) -> None:
    """Cancel a pending or running task. A pending task leaves the queue; a running one ends at once as
    cancelled, its running action is stopped, and so are the tasks its actions started. The cluster is
    left as it is: a change cancelled half done may need a retry or a restore (asks first unless --yes)."""
    confirm(f"cancel task {task_id}", yes)
    with state().client() as client:
        task = client.tasks.cancel(task_id)
        if wait:
            task = _until_stopped(client, task, timeout)
    if is_machine(output):
        emit(task, output)
        return
    console = make_console()
    console.print(Text(f"Cancelled task {task_id} ({task.type.value} of {task.deployment})."), soft_wrap=True)
    if task.started_at is not None:
        console.print(
            Text(
                "Styrmin left the cluster as it was: look at the deployment; a half-done change may need "
                f"a retry (styrminctl tasks retry {task_id}) or a restore.",
                style="dim",
            ),
            soft_wrap=True,
        )
    if wait:
        console.print(task_detail(task), soft_wrap=True)


def _until_stopped(client: Client, task: Task, timeout: float | None) -> Task:
    """``task`` once its agent has stopped its work (``stopped_at`` set); fails after ``timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while task.stopped_at is None:
        if deadline is not None and time.monotonic() >= deadline:
            fail(
                f"Task {task.id} is cancelled, but its agent had not stopped its running action after "
                f"{timeout:g} s. Look at the agent's logs; styrminctl tasks get {task.id} shows when it stopped."
            )
        time.sleep(poll_interval())
        task = client.tasks.get(task.id)
    return task
