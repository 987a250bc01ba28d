"""``styrminctl deployments history`` and ``rollback``: a deployment's revisions, and going back to one."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from styrmin.cli._common import EXIT_FAILED, OutputOption, WaitOption, WaitTimeoutOption, handle_errors, state
from styrmin.cli.deployments import NameArgument, app
from styrmin.cli.output import OutputFormat, dump, emit, is_machine, make_console
from styrmin.cli.preview import DryRunOption, show_preview
from styrmin.cli.progress import follow_changes
from styrmin.cli.render import clean, when

RevisionOption = Annotated[int, typer.Option("--to-revision", help="The revision to bring back.", min=1)]


@app.command()
@handle_errors
def history(
    name: NameArgument,
    revision: Annotated[
        int | None, typer.Option("--revision", help="Show only this revision, with its configuration.", min=1)
    ] = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """List the deployment's revisions: each change's type, versions, who asked, when, its task's status."""
    with state().client() as client:
        if revision is not None:
            entry = client.deployments.revision(name, revision)
            if is_machine(output):
                emit(entry, output)
            else:
                make_console().print(dump(entry, OutputFormat.YAML), soft_wrap=True, markup=False)
            return
        entries = client.deployments.history(name)
    if is_machine(output):
        emit(entries, output)
        return
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("REVISION", "TYPE", "DRIVER", "APP", "BY", "WHEN", "TASK", "STATUS"):
        table.add_column(column)
    for entry in entries:
        table.add_row(
            str(entry.revision),
            str(entry.type),
            Text(clean(f"{entry.driver}@{entry.driver_version}")),
            Text(clean(entry.app_version)),
            Text(clean(entry.requested_by)),
            when(entry.requested_at),
            str(entry.task_id or "-"),
            str(entry.task_status or "-"),
        )
    make_console().print(table)


@app.command()
@handle_errors
def rollback(
    name: NameArgument,
    to_revision: RevisionOption,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
    dry_run: DryRunOption = False,
) -> None:
    """Bring back a revision's driver version, application version and configuration (an upgrade, with
    its hooks, when a version changes; a configuration change otherwise)."""
    with state().client() as client:
        if dry_run:
            show_preview(client, name, "rollback", output, to_revision=to_revision)
            return
        rolled = client.deployments.rollback(name, to_revision)
        if not rolled.changes and not is_machine(output):
            make_console().print(
                f'Nothing to do: deployment "{name}" already asks for revision {to_revision}\'s versions '
                "and configuration.",
                soft_wrap=True,
            )
        action = f"Rolling back to revision {to_revision}:"
        changes, failed = follow_changes(client, action, rolled.changes, wait, timeout, output)
    if is_machine(output):
        document = rolled.model_dump(mode="json")
        document["changes"] = changes
        emit(document, output)
    if failed:
        if rolled.backup is not None:
            backup = rolled.backup
            make_console(stderr=True).print(
                f"If the driver refused to go back to application {backup.app_version}, restore backup "
                f"{backup.backup_id}, taken at revision {backup.revision} with those versions:\n"
                f"  styrminctl deployments restore {name} --backup {backup.backup_id}",
                soft_wrap=True,
            )
        raise typer.Exit(EXIT_FAILED)
