"""``styrminctl tasks logs ID``: the log lines of a task's actions, and the stored output of their commands.

The server reads the lines from Prefect, so no access to Prefect is needed; every role may read them,
and secrets are redacted. ``--follow`` prints new lines as the actions write them until the task ends.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from styrmin.cli._common import OutputOption, handle_errors, poll_interval, state
from styrmin.cli.output import OutputFormat, emit, is_machine, make_console
from styrmin.cli.render import clean
from styrmin.cli.tasks import TaskArgument, app

if TYPE_CHECKING:
    from styrmin.models import LogLine, StepOutput

_LEVEL_STYLES = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red", "DEBUG": "dim"}


def _line_text(line: LogLine) -> Text:
    text = Text()
    text.append(line.timestamp.strftime("%H:%M:%S "), style="dim")
    text.append(f"[{line.step}. {clean(line.action)}] ", style="bold")
    text.append(f"{line.level} ", style=_LEVEL_STYLES.get(line.level, ""))
    text.append(clean(line.message))
    return text


def _output_text(output: StepOutput) -> Text:
    text = Text()
    text.append(f"Output of step {output.step} ({clean(output.step_name)}):\n", style="bold")
    if output.output_truncated:
        text.append("Earlier output was cut\n", style="dim")
    text.append(clean(output.output_tail).rstrip("\n"))
    return text


@app.command()
@handle_errors
def logs(
    task_id: TaskArgument,
    step: Annotated[int | None, typer.Option("--step", help="Only this step's (its number).", min=1)] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the task ends.")
    ] = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Print the log lines of the task's actions, then the stored output of their failed commands."""
    console = make_console()
    lines: list[LogLine] = []
    warned = False
    with state().client() as client:
        offset = 0
        while True:
            page = client.tasks.logs(task_id, step=step, offset=offset)
            if page.prefect_error and not warned:
                make_console(stderr=True).print(clean(page.prefect_error), soft_wrap=True)
                warned = True
            for line in page.lines:
                if is_machine(output):
                    lines.append(line)
                else:
                    console.print(_line_text(line), soft_wrap=True)
            offset = page.next_offset
            if page.lines:
                continue  # more may be waiting at once
            if page.complete or not follow:
                break
            time.sleep(poll_interval())
    if is_machine(output):
        emit({"task_id": task_id, "lines": lines, "outputs": page.outputs}, output)
        return
    for stored in page.outputs:
        console.print(_output_text(stored), soft_wrap=True)
