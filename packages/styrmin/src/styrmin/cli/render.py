"""How styrminctl shows things to people: tasks with their steps, tables, reports and progress lines.

Everything the server sent is printed as plain text (never as Rich markup) with control characters
removed, so a command's output cannot move the cursor or change the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from styrmin._enums import TaskStatus

if TYPE_CHECKING:
    from styrmin.models import (
        Agent,
        Change,
        Deployment,
        Driver,
        DriverReport,
        StartedTask,
        Step,
        Task,
        TaskSummary,
        User,
    )

LABEL_WIDTH = 15
STEP_LABEL_WIDTH = 8
TRUNCATED_LINE = "Earlier output was cut; this is the end of it."
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")

STATUS_STYLES: dict[str, str] = {
    "pending": "dim",
    "running": "yellow",
    "succeeded": "green",
    "failed": "bold red",
    "cancelled": "magenta",
    "deploying": "yellow",
    "upgrade-failed": "bold red",
    "stopped": "blue",
    "deleting": "yellow",
    "deleted": "dim",
}
STATUS_ICONS: dict[str, str] = {
    "pending": "·",
    "running": "»",
    "succeeded": "✓",
    "failed": "✗",
    "cancelled": "⊘",
}


# --- small pieces ------------------------------------------------------------------------------


def clean(text: str) -> str:
    """``text`` safe for a terminal: ANSI sequences and control characters removed; a line that a
    carriage return rewrote keeps what was written last, as a terminal would have shown it."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    lines = [
        line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
        for line in text.split("\n")
    ]
    return _CONTROL.sub("", "\n".join(lines)).replace("\t", "    ")


def when(moment: datetime | None) -> str:
    """A time as ``2025-01-31 12:00:03 UTC``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "-"


def duration(span: timedelta | None) -> str:
    """A duration as ``850ms``, ``3.2s``, ``1m 03s`` or ``2h 05m``."""
    if span is None:
        return "-"
    seconds = span.total_seconds()
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d {whole % 86400 // 3600:02d}h"


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago, as kubectl shows it: ``45s``, ``12m``, ``3h``, ``2d``."""
    if moment is None:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def status(value: str) -> Text:
    """A status word in its colour."""
    return Text(value, style=STATUS_STYLES.get(value, ""))


def _field(label: str, value: str | Text, indent: int = 0, width: int = LABEL_WIDTH) -> Text:
    """``Label:   value`` with continuation lines of a multi-line value aligned under its start."""
    pad = " " * indent
    head = Text(f"{pad}{label + ':':<{width}}", style="bold")
    body = value if isinstance(value, Text) else Text(clean(value))
    lines = body.split("\n", allow_blank=True)
    text = head + lines[0] if lines else head
    for line in lines[1:]:
        text.append("\n" + pad + " " * width)
        text.append_text(line)
    return text


def _block(lines: Iterable[str], indent: int, style: str = "") -> list[Text]:
    return [Text(" " * indent + line, style=style) for line in lines]


def _yaml_lines(data: Any) -> list[str]:
    import yaml

    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip("\n")
    return clean(text).split("\n")


def _table(*columns: str) -> Table:
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _short(text: str | None, limit: int = 60) -> str:
    if not text:
        return ""
    first = clean(text).strip().split("\n", 1)[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


# --- tasks -------------------------------------------------------------------------------------


def task_detail(task: Task) -> Group:
    """The task as ``styrminctl tasks get`` shows it: what it is, who asked, its result, then every step
    with its status, duration, error, notes, kept output and the tasks it started."""
    parts: list[RenderableType] = [
        _field("Task", str(task.id)),
        _field("Type", task.type.value),
        _field("Deployment", task.deployment),
        _field("Revision", "-" if task.revision is None else str(task.revision)),
        _field("Status", status(task.status.value)),
        _field("Requested by", task.requested_by),
    ]
    if task.waiting is not None:
        parts.append(_field("Waiting", Text(clean(task.waiting.message), style="yellow")))
    if task.cancelled_by is not None:
        parts.append(_field("Cancelled by", f"{clean(task.cancelled_by)}, {when(task.cancelled_at)}"))
    if task.started_by is not None:
        by = task.started_by
        parts.append(
            _field(
                "Started by",
                f'step "{by.step_name}" (step {by.step_id}) of task {by.task_id} ({by.task_type.value})',
            )
        )
    parts += [
        _field("Created", when(task.created_at)),
        _field("Started", when(task.started_at)),
        _field("Ended", when(task.ended_at)),
        _field(
            "Duration", duration(task.duration) + ("" if task.ended or task.started_at is None else " so far")
        ),
    ]
    if task.error:
        parts.append(_field("Error", Text(clean(task.error), style="red")))
    if task.result is not None:
        parts.append(Text("Result:", style="bold"))
        parts += _block(_yaml_lines(task.result), 2)
    if not task.steps:
        parts.append(_field("Steps", "none yet" if not task.ended else "none"))
        return Group(*parts)
    parts.append(Text("Steps:", style="bold"))
    for step in task.steps:
        parts += step_detail(step)
    return Group(*parts)


def step_detail(step: Step, indent: int = 2) -> list[RenderableType]:
    """One step: its heading line, then error, notes, output and started tasks under it."""
    pad = " " * indent
    inner = indent + 4
    head = Text(f"{pad}{step.position + 1}. ", style="bold")
    head.append(clean(step.name), style="bold")
    head.append("  ")
    head.append_text(status(step.status.value))
    if step.started_at is not None:
        head.append(f"  {duration(step.duration)}" + ("" if step.status.ended else " so far"))
    parts: list[RenderableType] = [head]
    if step.error:
        parts.append(_field("Error", Text(clean(step.error), style="red"), inner, STEP_LABEL_WIDTH))
    for note in step.notes:
        parts.append(_field("Note", note, inner, STEP_LABEL_WIDTH))
    if step.output_tail is not None:
        parts.append(Text(" " * inner + "Output:", style="bold"))
        if step.output_truncated:
            parts.append(Text(" " * (inner + 2) + TRUNCATED_LINE, style="italic yellow"))
        lines = clean(step.output_tail).rstrip("\n").split("\n")
        parts += _block((f"| {line}" for line in lines), inner + 2)
    if step.started_tasks:
        parts.append(Text(" " * inner + "Started tasks:", style="bold"))
        for started in step.started_tasks:
            parts += started_task_detail(started, inner + 2)
    return parts


def started_task_detail(started: StartedTask, indent: int) -> list[RenderableType]:
    """A task a step started: its id, type and status, its error, and its result."""
    line = Text(" " * indent + f"Task {started.id} ({started.type.value}): ")
    line.append_text(status(started.status.value))
    parts: list[RenderableType] = [line]
    if started.error:
        parts.append(_field("Error", Text(clean(started.error), style="red"), indent + 2, STEP_LABEL_WIDTH))
    if started.result is not None:
        parts.append(Text(" " * (indent + 2) + "Result:", style="bold"))
        parts += _block(_yaml_lines(started.result), indent + 4)
    elif not started.status.ended:
        parts.append(Text(" " * (indent + 2) + "Result: none yet", style="dim"))
    return parts


def tasks_table(tasks: Sequence[TaskSummary], wide: bool = False) -> Table:
    columns = [
        "ID", "DEPLOYMENT", "TYPE", "STATUS", "REVISION", "REQUESTED BY", "AGE", "DURATION", "ERROR / WAITING"
    ]  # fmt: skip
    table = _table(*columns, *(["CREATED", "ENDED"] if wide else []))
    for t in tasks:
        row: list[str | Text] = [
            str(t.id),
            clean(t.deployment),
            t.type.value,
            status(t.status.value),
            "-" if t.revision is None else str(t.revision),
            clean(t.requested_by),
            age(t.created_at),
            duration(t.duration),
            _short(t.waiting.message if t.waiting is not None else t.error, 200 if wide else 60),
        ]
        if wide:
            row += [when(t.created_at), when(t.ended_at)]
        table.add_row(*row)
    return table


def progress_lines(previous: Task | None, task: Task) -> list[Text]:
    """What changed between two reads of a task, one line each, for output that is not a terminal.

    The task's line is repeated when its status changes, and while it waits, when why it waits does.
    """
    lines: list[Text] = []
    heading: Text | None = None
    waits = waiting_message(task)
    if previous is None or previous.status != task.status or waiting_message(previous) != waits:
        heading = Text(f"Task {task.id} ({task.type.value} of {clean(task.deployment)}): ")
        heading.append_text(status(task.status.value))
        if task.ended:
            heading.append(f" after {duration(task.duration)}" if task.started_at else "")
        else:
            if waits:
                heading.append(f"  {waits}", style="yellow")
            lines.append(heading)
    before = {s.id: s for s in previous.steps} if previous else {}
    for step in task.steps:
        old = before.get(step.id)
        if old is not None and old.status == step.status:
            continue
        line = Text(f"  {STATUS_ICONS.get(step.status.value, '-')} {step.position + 1}. {clean(step.name)}: ")
        line.append_text(status(step.status.value))
        if step.status.ended:
            line.append(f" in {duration(step.duration)}")
        lines.append(line)
        if step.status == TaskStatus.FAILED and step.error:
            lines.append(Text(f"      {_short(step.error, 200)}", style="red"))
    if heading is not None and task.ended:
        lines.append(heading)  # an ended task is reported after its last steps
    return lines


def waiting_message(task: Task) -> str:
    """Why the server says the task waits (no agent, no slot, another Helm operation), or ""."""
    if task.waiting is None or task.ended:
        return ""
    return _short(task.waiting.message, 300)


def progress_table(task: Task) -> Group:
    """The live view of a task while it runs (redrawn in place on a terminal)."""
    title = Text(f"Task {task.id} ({task.type.value} of {clean(task.deployment)}): ", style="bold")
    title.append_text(status(task.status.value))
    if task.started_at:
        title.append(f"  {duration(task.duration)}")
    waits = waiting_message(task)
    if waits or not task.started_at:
        title.append(f"  {waits or 'waiting for the agent'}", style="yellow" if waits else "")
    rows = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    for _ in range(4):
        rows.add_column()
    for step in task.steps:
        icon = Text(STATUS_ICONS.get(step.status.value, "-"), style=STATUS_STYLES.get(step.status.value, ""))
        rows.add_row(
            icon,
            Text(f"{step.position + 1}. {clean(step.name)}"),
            status(step.status.value),
            duration(step.duration) if step.started_at else "",
        )
    return Group(title, rows) if task.steps else Group(title)


# --- changes and deployments -------------------------------------------------------------------


def change_line(action: str, change: Change, follow_hint: bool = True) -> Text:
    """What a change command did: the task it recorded, or that nothing changes."""
    d = change.deployment
    if change.task is None:
        return Text(
            f"Nothing to do: {clean(d.name)} already runs application {clean(d.app_version)} "
            f"with driver {clean(d.driver)}@{clean(d.driver_version)}, and its last change succeeded."
        )
    t = change.task
    line = f"{action} {clean(d.name)}: revision {t.revision}, task {t.id} ({t.status.value})."
    return Text(line + (f" Follow it with: styrminctl tasks wait {t.id}" if follow_hint else ""))


def deployments_table(deployments: Sequence[Deployment], wide: bool = False) -> Table:
    columns = ["NAME", "NAMESPACE", "DRIVER", "APP VERSION", "STATUS", "STOPPED", "REVISION", "AGE"]
    table = _table(*columns, *(["CLUSTER", "RUNNING", "REASON"] if wide else []))
    for d in deployments:
        row: list[str | Text] = [
            clean(d.name),
            clean(d.namespace),
            f"{clean(d.driver)}@{clean(d.driver_version)}",
            clean(d.app_version),
            status(d.status.value),
            clean(", ".join(d.stopped_components)) or "-",
            str(d.revision),
            age(d.created_at),
        ]
        if wide:
            running = (
                f"{clean(d.running_app_version)} ({clean(d.driver)}@{clean(d.running_driver_version or '-')})"
                if d.running_app_version
                else "-"
            )
            row += [clean(d.cluster), running, _short(d.status_reason)]
        table.add_row(*row)
    return table


def _status_with_reason(d: Deployment) -> Text:
    shown = status(d.status.value)
    if d.status_reason:
        shown.append(f"  {clean(d.status_reason)}")
    return shown


def deployment_detail(d: Deployment, recent: Sequence[TaskSummary] = ()) -> Group:
    parts: list[RenderableType] = [
        _field("Name", d.name),
        _field("Namespace", d.namespace),
        _field("Cluster", d.cluster),
        _field("Driver", f"{d.driver}@{d.driver_version}"),
        _field("App version", d.app_version),
        _field(
            "Running",
            f"application {d.running_app_version}, driver {d.running_driver_version or '-'}"
            if d.running_app_version
            else "nothing applied yet",
        ),
        _field("Status", _status_with_reason(d)),
        _field("Stopped", ", ".join(d.stopped_components) or "none"),
        _field("Revision", str(d.revision)),
        _field("Created", when(d.created_at)),
        _field("Updated", when(d.updated_at)),
        Text("Configuration:", style="bold"),
    ]
    parts += _block(_yaml_lines(d.configuration.model_dump(mode="json")), 2)
    if recent:
        parts.append(Text("Recent tasks:", style="bold"))
        parts.append(tasks_table(recent))
    return Group(*parts)


# --- drivers -----------------------------------------------------------------------------------


def drivers_table(drivers: Sequence[Driver], wide: bool = False) -> Table:
    columns = ["NAME", "VERSION", "APPLICATION", "COMPONENTS", "ACTIONS", "PUSHED BY", "AGE"]
    table = _table(*columns, *(["CHECKSUM", "DESCRIPTION"] if wide else []))
    for d in drivers:
        row = [
            clean(d.name),
            clean(d.version),
            f"{clean(d.application.name)} {clean(d.application.default_version)}",
            clean(", ".join(c.name for c in d.components)) or "-",
            str(len(d.actions)),
            clean(d.pushed_by),
            age(d.pushed_at),
        ]
        if wide:
            row += [clean(d.checksum), _short(d.description)]
        table.add_row(*row)
    return table


def driver_detail(d: Driver) -> Group:
    from styrmin.models import DriverReport  # at run time here only: the CLI starts without the models

    parts: list[RenderableType] = [
        _field("Driver", f"{d.name}@{d.version}"),
        _field("Description", d.description or "-"),
        _field("Application", f"{d.application.name} (default version {d.application.default_version})"),
        _field("Checksum", d.checksum),
        _field("Pushed by", d.pushed_by),
        _field("Pushed", when(d.pushed_at)),
    ]
    parts += [
        Text(line) for line in report_lines(DriverReport(components=d.components, actions=d.actions))[1:]
    ]
    return Group(*parts)


def report_lines(report: DriverReport) -> list[str]:
    """A validation report, as ``styrminctl drivers validate`` prints it: every problem, or a summary."""
    title = f"{report.name}@{report.version}" if report.name and report.version else "The driver"
    if report.problems:
        count = len(report.problems)
        return [f"{title} is not valid: {count} problem{'s' if count != 1 else ''}."] + [
            clean(str(p)) for p in report.problems
        ]
    lines = [f"{title} is valid.", f"Components ({len(report.components)}):"]
    for c in report.components:
        container = f", container {c.container}" if c.container else ""
        lines.append(clean(f"  {c.name}: {c.workload_kind} {c.workload_name}{container}"))
    lines.append(f"Actions ({len(report.actions)}):")
    for a in report.actions:
        description = f" - {a.description}" if a.description else ""
        lines.append(clean(f"  {a.name}: {a.hook.value} {a.mode.value}, {a.location}{description}"))
    return lines


# --- users -------------------------------------------------------------------------------------

ROLE_LABELS = {"admin": "Admin", "read-write": "Read/write", "read-only": "Read-only"}


def agents_table(agents: Sequence[Agent], wide: bool = False) -> Table:
    """The agents as ``agents list`` shows them; ``wide`` adds each connected process and its tasks."""
    table = _table(
        "NAME", "CLUSTER", "STATE", "LAST SEEN", "PROCESSES", "AGE", *(["RUNNING"] if wide else [])
    )
    for a in agents:
        # An older server answers no state: what its answer says is still worth a word.
        state = a.state or ("revoked" if a.revoked else "-")
        running = [task for process in a.processes for task in process.running_tasks]
        row: list[str | Text] = [
            clean(a.name),
            clean(a.cluster),
            status(state),
            age(a.last_seen_at) if a.last_seen_at else "never",
            str(len(a.processes)),
            age(a.created_at),
        ]
        if wide:
            row.append(", ".join(f"task {task}" for task in running) or "-")
        table.add_row(*row)
    return table


def users_table(users: Sequence[User]) -> Table:
    table = _table("USERNAME", "ROLE", "ACTIVE", "BUILT-IN", "PASSWORD", "AGE")
    for u in users:
        table.add_row(
            clean(u.username),
            ROLE_LABELS.get(u.role.value, u.role.value),
            "yes" if u.active else Text("no", style="red"),
            "yes" if u.builtin else "no",
            "set" if u.has_password else "none",
            age(u.created_at),
        )
    return table


def user_line(verb: str, user: User) -> Text:
    state = "active" if user.active else "deactivated"
    return Text(
        f"{verb} {clean(user.username)}: {ROLE_LABELS.get(user.role.value, user.role.value)}, {state}."
    )
