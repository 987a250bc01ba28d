"""``styrminctl backups``: take a backup of a deployment, list its backups, show one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from styrmin.cli._common import (
    EXIT_FAILED,
    GetOutputOption,
    ListOutputOption,
    OutputOption,
    WaitOption,
    WaitTimeoutOption,
    YesOption,
    complete_deployment,
    confirm,
    handle_errors,
    state,
)
from styrmin.cli.output import GetFormat, ListFormat, OutputFormat, emit, emit_names, is_machine, make_console
from styrmin.cli.progress import finish_change
from styrmin.cli.render import _field, _table, age, clean, status, when

if TYPE_CHECKING:  # the models load only when a command runs, so --help starts fast
    from styrmin.models import Backup, BackupLocation, BackupSchedule, ClusterBackupLocation

app = typer.Typer(help="Backups of deployments: take one, list them, show one.", no_args_is_help=True)

DeploymentArgument = Annotated[
    str, typer.Argument(help="The deployment's name.", show_default=False, autocompletion=complete_deployment)
]
BackupArgument = Annotated[int, typer.Argument(help="The backup's id.", show_default=False, min=1)]


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


def backups_table(backups: Sequence[Backup], wide: bool = False) -> Group:
    columns = ["ID", "DEPLOYMENT", "STATUS", "LABEL", "APP VERSION", "DRIVER", "FILES", "SIZE", "AGE"]
    table = _table(*columns, *(["TASK", "REQUESTED BY", "LOCATION"] if wide else []))
    for b in backups:
        row: list[str | Text] = [
            str(b.id),
            clean(b.deployment),
            status(str(b.status)),
            clean(b.label),
            clean(b.app_version),
            f"{clean(b.driver)}@{clean(b.driver_version)}",
            str(len(b.files)),
            _size(sum(f.size for f in b.files)),
            age(b.created_at),
        ]
        if wide:
            row += [str(b.task_id) if b.task_id else "-", clean(b.requested_by), clean(b.location or "-")]
        table.add_row(*row)
    return Group(table)


def backup_detail(b: Backup) -> Group:
    parts: list[RenderableType] = [
        _field("Backup", str(b.id)),
        _field("Deployment", b.deployment),
        _field("Status", status(str(b.status))),
        _field("Label", b.label),
        _field("Driver", f"{b.driver}@{b.driver_version}"),
        _field("App version", b.app_version),
        _field("Revision", str(b.revision)),
        _field("Requested by", b.requested_by),
        _field("Task", str(b.task_id) if b.task_id else "-"),
        _field("Created", when(b.created_at)),
        _field("Ended", when(b.ended_at)),
        _field("Location", b.location or "-"),
        _field("Key", b.key),
    ]
    if b.error:
        parts.append(_field("Error", b.error))
    parts.append(Text("Files:", style="bold"))
    if not b.files:
        parts.append(Text("  none"))
    for f in b.files:
        parts.append(Text(f"  {clean(f.name)}  {_size(f.size)}  sha256 {f.sha256}"))
    return Group(*parts)


@app.command()
@handle_errors
def create(
    deployment: DeploymentArgument,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Back up a deployment through its driver's backup hook (refused when the driver has none)."""
    from styrmin.models import Change

    with state().client() as client:
        taken = client.backups.create(deployment)
        if not wait and is_machine(output):
            emit(taken, output)
            return
        if not is_machine(output):
            make_console().print(Text(f"Backup {taken.backup.id} of {clean(deployment)}:"), soft_wrap=True)
        finish_change(
            client, "Backing up", Change(deployment=taken.deployment, task=taken.task), wait, timeout, output
        )
        if wait and not is_machine(output):
            make_console().print(backup_detail(client.backups.get(taken.backup.id)), soft_wrap=True)


@app.command("list")
@handle_errors
def list_backups(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Only this deployment's (the same as --deployment).",
            show_default=False,
            autocompletion=complete_deployment,
        ),
    ] = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            "--deployment", "-d", help="Only this deployment's.", autocompletion=complete_deployment
        ),
    ] = None,
    status_: Annotated[
        str | None, typer.Option("--status", help="Only those with this status (succeeded, failed, ...).")
    ] = None,
    output: ListOutputOption = ListFormat.TEXT,
) -> None:
    """List every backup you may read (every role reads all of them), newest first."""
    deployment = deployment or name
    with state().client() as client:
        found = client.backups.list(deployment, status=status_)
    if is_machine(output):
        emit(found, output)
    elif output == ListFormat.NAME:
        emit_names("backup", [str(b.id) for b in found])
    elif not found and deployment and not status_:
        make_console().print(
            f"No backups of {clean(deployment)} yet; take one with: styrminctl backups create {clean(deployment)}",
            soft_wrap=True,
        )
    elif not found:
        make_console().print("No backups match." if status_ else "No backups yet.", soft_wrap=True)
    else:
        make_console().print(backups_table(found, wide=output == ListFormat.WIDE))


@app.command()
@handle_errors
def get(backup_id: BackupArgument, output: GetOutputOption = GetFormat.TEXT) -> None:
    """Show a backup: versions, status, and each file with its size and sha256."""
    with state().client() as client:
        backup = client.backups.get(backup_id)
    if output == GetFormat.NAME:
        emit_names("backup", [str(backup.id)])
    elif is_machine(output):
        emit(backup, output)
    else:
        make_console().print(backup_detail(backup), soft_wrap=True)


ClusterOption = Annotated[str, typer.Option("--cluster", help="The cluster whose backups it is about.")]


def _location_lines(label: str, location: BackupLocation | None) -> list[RenderableType]:
    if location is None:
        return [_field(label, "the agent's own folder (STYRMIN_AGENT_BACKUP_DIR)")]
    parts: list[RenderableType] = [_field(label, location.description)]
    if location.secret:
        parts.append(_field("  Credentials", f"Secret {location.secret} (not shown)"))
    parts.append(_field("  Status", status(location.status)))
    parts.append(_field("  Set by", f"{location.requested_by}, {when(location.requested_at)}"))
    if location.error:
        parts.append(_field("  Error", location.error))
    return parts


def location_detail(found: ClusterBackupLocation) -> Group:
    parts: list[RenderableType] = [_field("Cluster", found.cluster)]
    parts += _location_lines("In use", found.in_use)
    if found.latest is not None:
        parts += _location_lines("Newer", found.latest)
    return Group(*parts)


@app.command()
@handle_errors
def delete(
    backup_id: BackupArgument,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Delete a backup: a task of its deployment deletes its files, then the backup is gone (asks
    first unless --yes)."""
    confirm(f"delete backup {backup_id} and its files", yes)
    with state().client() as client:
        change = client.backups.delete(backup_id)
        finish_change(client, f"Deleting backup {backup_id} of", change, wait, timeout, output)


@app.command()
@handle_errors
def location(cluster: ClusterOption = "local", output: OutputOption = OutputFormat.TEXT) -> None:
    """Show where a cluster's backups are stored (never credentials)."""
    with state().client() as client:
        found = client.backups.location(cluster)
    if is_machine(output):
        emit(found, output)
    else:
        make_console().print(location_detail(found), soft_wrap=True)


@app.command("set-location")
@handle_errors
def set_location(
    cluster: ClusterOption = "local",
    folder: Annotated[str | None, typer.Option(help="A folder the agent and pods share.")] = None,
    bucket: Annotated[str | None, typer.Option(help="An S3-compatible bucket.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Where in the bucket, e.g. styrmin/prod.")] = None,
    endpoint_url: Annotated[
        str | None, typer.Option(help="The S3-compatible server; leave out for AWS.")
    ] = None,
    region: Annotated[str | None, typer.Option(help="The bucket's region.")] = None,
    secret: Annotated[
        str | None,
        typer.Option(help="NAMESPACE/NAME of the Secret with keys access_key_id and secret_access_key."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait for the agent's check; exit 1 if it failed.")
    ] = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Set a cluster's backup location (Admin); the cluster's agent checks it before backups use it."""
    import time

    from styrmin.errors import StyrminError, WaitTimeoutError

    with state().client() as client:
        set_ = client.backups.set_location(
            cluster,
            folder=folder,
            bucket=bucket,
            prefix=prefix,
            endpoint_url=endpoint_url,
            region=region,
            secret=secret,
        )
        deadline = time.monotonic() + (timeout if timeout is not None else 300)
        while wait and set_.status == "checking":
            if time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"Backup location {set_.id} of cluster {cluster} is still being checked; is its agent running?"
                )
            time.sleep(0.5)
            found = client.backups.location(cluster)
            set_ = next(loc for loc in (found.latest, found.in_use) if loc is not None and loc.id == set_.id)
    if is_machine(output):
        emit(set_, output)  # a failed check is in the document itself (status, error): nothing more
        if set_.status == "failed":
            raise typer.Exit(EXIT_FAILED)
        return
    make_console().print(Group(*_location_lines("Location", set_)), soft_wrap=True)
    if set_.status == "failed":
        raise StyrminError(
            f"The check of backup location {set_.id} failed; the location in use did not change."
        )


def schedule_detail(s: BackupSchedule) -> Group:
    keep = []
    if s.keep_count is not None:
        keep.append(f"the newest {s.keep_count}")
    if s.keep_days is not None:
        keep.append(f"those younger than {s.keep_days} days")
    parts: list[RenderableType] = [
        _field("Deployment", s.deployment),
        _field("Cron (UTC)", s.cron),
        _field("Keeps", " and ".join(keep) + " (scheduled backups)" if keep else "every backup"),
        _field("Next backup", when(s.next_run_at)),
        _field("Last started", when(s.last_started_at)),
        _field("Set by", s.updated_by),
    ]
    if s.last_error:
        parts.append(_field("Error", s.last_error))
    return Group(*parts)


@app.command()
@handle_errors
def schedule(deployment: DeploymentArgument, output: OutputOption = OutputFormat.TEXT) -> None:
    """Show a deployment's backup schedule and retention."""
    with state().client() as client:
        found = client.backups.schedule(deployment)
    if is_machine(output):
        emit(found, output)
    else:
        make_console().print(schedule_detail(found), soft_wrap=True)


@app.command("set-schedule")
@handle_errors
def set_schedule(
    deployment: DeploymentArgument,
    cron: Annotated[str, typer.Option(help="When, as five cron fields in UTC, e.g. '0 3 * * *'.")],
    keep_count: Annotated[int | None, typer.Option(help="Keep this many scheduled backups.", min=1)] = None,
    keep_days: Annotated[
        int | None, typer.Option(help="Delete scheduled backups older than this.", min=1)
    ] = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Back up a deployment on a schedule; older scheduled backups are deleted by the retention given."""
    with state().client() as client:
        found = client.backups.set_schedule(deployment, cron, keep_count=keep_count, keep_days=keep_days)
    if is_machine(output):
        emit(found, output)
    else:
        make_console().print(schedule_detail(found), soft_wrap=True)


@app.command("remove-schedule")
@handle_errors
def remove_schedule(deployment: DeploymentArgument, yes: YesOption = False) -> None:
    """Stop taking scheduled backups of a deployment (the backups taken stay; asks first unless --yes)."""
    confirm(f"stop the scheduled backups of {deployment}", yes)
    with state().client() as client:
        client.backups.remove_schedule(deployment)
    make_console().print(f"Removed the backup schedule of {clean(deployment)}.", soft_wrap=True)
