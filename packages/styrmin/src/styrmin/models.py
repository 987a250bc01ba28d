"""Typed models of what the Styrmin API answers: drivers, deployments, changes, tasks, steps, users.

Field names are the API's (``GET /api/openapi.json``), so ``model.model_dump(mode="json")`` gives the
same JSON the server sent. Unknown fields from a newer server are ignored.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from styrmin._enums import DeploymentStatus as DeploymentStatus
from styrmin._enums import Hook as Hook
from styrmin._enums import Mode as Mode
from styrmin._enums import Role as Role
from styrmin._enums import StepStatus as StepStatus
from styrmin._enums import TaskStatus as TaskStatus
from styrmin._enums import TaskType as TaskType


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


Time = Annotated[datetime, AfterValidator(_as_utc)]
"""An aware UTC time (a server on SQLite may send times without an offset; they are UTC)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# --- auth and users ----------------------------------------------------------------------------


class IssuedToken(_Model):
    """An API token as login hands it out: the token itself is shown only once."""

    id: int
    token: str
    expires_at: Time


class WhoAmI(_Model):
    """The user a token belongs to."""

    username: str
    role: Role
    builtin: bool
    token_kind: str


class User(_Model):
    """A user of Styrmin."""

    username: str
    role: Role
    active: bool
    builtin: bool = Field(description="Built-in users (styrmin-actions) have no password and cannot log in.")
    has_password: bool
    created_at: Time


class AgentProcess(_Model):
    """A running process of an agent that holds its connection to a server open now."""

    instance: str
    connected_at: Time
    seen_at: Time
    running_tasks: list[int] = []


class Agent(_Model):
    """An agent: it runs the changes of the deployments of one cluster."""

    name: str
    cluster: str
    created_at: Time
    revoked: bool
    last_seen_at: Time | None
    processes: list[AgentProcess] = Field(
        default=[], description="Its processes connected now (listed agents only; older servers: none)."
    )
    state: str | None = Field(
        default=None,
        description='"connected", "not-connected", "never-connected" or "revoked" (older servers: none).',
    )


class AgentKey(_Model):
    """A new agent and its key, shown only once: give the key to `styrmin agent`."""

    agent: Agent
    key: str


class PasswordReset(_Model):
    """A new random password, shown only once."""

    username: str
    password: str


# --- drivers -----------------------------------------------------------------------------------


class DriverApplication(_Model):
    """The application a driver deploys."""

    name: str
    default_version: str


class DriverComponent(_Model):
    """A component of a driver: a workload that can be stopped and started, with its main container."""

    name: str
    workload_kind: str
    workload_name: str
    container: str | None = None


class DriverAction(_Model):
    """An action of a driver: a Prefect flow run at a hook, in a mode."""

    name: str
    hook: Hook
    mode: Mode
    location: str
    description: str | None = None
    timeout: int


class Driver(_Model):
    """A stored driver version."""

    name: str
    version: str
    description: str | None = None
    checksum: str = Field(description="SHA-256 of the stored .tar.gz.")
    application: DriverApplication
    components: list[DriverComponent]
    actions: list[DriverAction]
    pushed_by: str
    pushed_at: Time


class DriverPush(_Model):
    """The answer to a push: the stored driver, and whether this push stored it (False: it was there)."""

    created: bool
    driver: Driver


class DriverProblem(_Model):
    """One thing wrong with a driver: where (file, line, field) and what to do."""

    file: str
    line: int | None = None
    field: str | None = None
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f", line {self.line}"
        if self.field:
            where += f", {self.field}"
        return f"{where}: {self.message}"


class DriverReport(_Model):
    """The result of validating a driver: every problem, and what the driver declares."""

    name: str | None = None
    version: str | None = None
    components: list[DriverComponent] = []
    actions: list[DriverAction] = []
    problems: list[DriverProblem] = []

    @property
    def valid(self) -> bool:
        """Whether the driver has no problem."""
        return not self.problems


# --- deployments and changes -------------------------------------------------------------------


class Configuration(_Model):
    """A deployment's configuration: Helm values, image override and env vars per component."""

    values: dict[str, Any] = Field(default_factory=dict)
    images: dict[str, str] = Field(default_factory=dict)
    env: dict[str, dict[str, str]] = Field(default_factory=dict)


class Deployment(_Model):
    """A deployment of a driver's application: the versions it should run, and what the cluster runs."""

    id: int | None = None
    name: str
    namespace: str
    cluster: str
    driver: str
    driver_version: str
    app_version: str
    running_app_version: str | None = Field(
        default=None, description="What the cluster runs, as last applied."
    )
    running_driver_version: str | None = None
    configuration: Configuration
    stopped_components: list[str]
    status: DeploymentStatus
    status_reason: str = Field(default="", description="One sentence saying why the status is what it is.")
    status_task_id: int | None = Field(default=None, description="The task that decided the status.")
    revision: int
    created_at: Time
    updated_at: Time


class Waiting(_Model):
    """Why a task waits: ``no-agent``, ``not-claimed``, ``slots-taken`` or ``helm-operation`` (of task
    ``task_id``)."""

    reason: str
    message: str
    task_id: int | None = None


class TaskSummary(_Model):
    """A task as lists show it (without its steps)."""

    id: int
    type: TaskType
    status: TaskStatus
    deployment: str
    revision: int | None = None
    requested_by: str
    created_at: Time
    started_at: Time | None = None
    ended_at: Time | None = None
    error: str | None = None
    parent_task_id: int | None = None
    cancelled_by: str | None = None
    cancelled_at: Time | None = None
    stopped_at: Time | None = None
    """For a cancelled task: when its agent had stopped its work; None while it still stops it."""
    waiting: Waiting | None = None
    """Why a pending task has not started, or a running one waits; None otherwise."""

    @property
    def ended(self) -> bool:
        """Whether the task has ended (succeeded, failed or cancelled)."""
        return self.status.ended

    @property
    def duration(self) -> timedelta | None:
        """How long it ran: to its end, or so far; None before it started."""
        return _duration(self.started_at, self.ended_at)


class Change(_Model):
    """The answer to a change (create, upgrade, configure, stop, start, delete)."""

    deployment: Deployment
    task: TaskSummary | None = Field(description="The task that carries it out; None when nothing changes.")


class TaskPage(_Model):
    """A page of tasks, newest first; pass ``next_before`` as ``before`` for the next page."""

    items: list[TaskSummary]
    next_before: int | None = None


class StartedTask(_Model):
    """A task that a step's action started, with its result."""

    id: int
    type: TaskType
    status: TaskStatus
    error: str | None = None
    result: dict[str, Any] | None = None


class Step(_Model):
    """One step of a task."""

    id: int
    position: int
    name: str
    status: StepStatus
    started_at: Time | None = None
    ended_at: Time | None = None
    error: str | None = None
    output_tail: str | None = Field(default=None, description="The kept end of a failed command's output.")
    output_truncated: bool = Field(default=False, description="True when earlier output was cut.")
    notes: list[str] = []
    flow_run_id: str | None = None
    started_tasks: list[StartedTask] = []

    @property
    def duration(self) -> timedelta | None:
        """How long it ran: to its end, or so far; None before it started."""
        return _duration(self.started_at, self.ended_at)


class StartedBy(_Model):
    """The hook step whose action started a task."""

    task_id: int
    task_type: TaskType
    step_id: int
    step_name: str


class Task(TaskSummary):
    """A task with its steps in order, its result and, when an action started it, where from."""

    result: dict[str, Any] | None = None
    started_by: StartedBy | None = None
    steps: list[Step] = []


def _duration(started: datetime | None, ended: datetime | None) -> timedelta | None:
    if started is None:
        return None
    return max((ended or datetime.now(UTC)) - started, timedelta(0))


__all__ = [
    "Backup",
    "BackupChange",
    "BackupFile",
    "BackupLocation",
    "BackupSchedule",
    "Change",
    "ClusterBackupLocation",
    "Configuration",
    "Deployment",
    "DeploymentStatus",
    "Driver",
    "DriverAction",
    "DriverApplication",
    "DriverComponent",
    "DriverProblem",
    "DriverPush",
    "DriverReport",
    "Hook",
    "IssuedToken",
    "Mode",
    "PasswordReset",
    "Role",
    "StartedBy",
    "StartedTask",
    "Step",
    "StepStatus",
    "Task",
    "TaskPage",
    "TaskStatus",
    "TaskSummary",
    "TaskType",
    "User",
    "Waiting",
    "WhoAmI",
]


class BackupFile(_Model):
    """One file of a backup: its path in the backup's folder, size and sha256."""

    name: str
    size: int
    sha256: str


class Backup(_Model):
    """A backup of a deployment: the versions and configuration it was taken at, and its files."""

    id: int
    deployment: str
    driver: str
    driver_version: str
    app_version: str
    revision: int
    configuration: dict[str, Any] = Field(default_factory=dict)
    location: str
    key: str
    files: list[BackupFile]
    status: str = Field(description="pending, running, succeeded, failed, or deleting.")
    label: str = Field(description="manual, scheduled or pre-upgrade.")
    requested_by: str
    task_id: int | None
    created_at: Time
    ended_at: Time | None = None
    error: str | None = None


class BackupChange(_Model):
    """The answer to a backup request: the backup, and the task that takes it."""

    backup: Backup
    deployment: Deployment
    task: TaskSummary


class BackupLocation(_Model):
    """A backup storage location an administrator set for a cluster: where, never credentials."""

    id: int
    cluster: str
    kind: str = Field(description="folder or s3.")
    description: str
    folder: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    secret: str | None = Field(
        default=None, description="NAMESPACE/NAME of the Secret holding the credentials."
    )
    status: str = Field(description="checking, ready or failed.")
    error: str | None = None
    requested_by: str
    requested_at: Time
    checked_at: Time | None = None


class BackupSchedule(_Model):
    """A deployment's backup schedule: a cron expression (UTC) and which scheduled backups to keep."""

    deployment: str
    cron: str
    keep_count: int | None = None
    keep_days: int | None = None
    next_run_at: Time
    last_started_at: Time | None = None
    last_error: str | None = None
    updated_by: str
    updated_at: Time


class ClusterBackupLocation(_Model):
    """Where a cluster's backups go now (None: its agent's own folder), and a newer location not in use."""

    cluster: str
    in_use: BackupLocation | None = None
    latest: BackupLocation | None = None


# --- previews, revisions, rollback, apply, task logs -----------------------------------------


class Refusal(_Model):
    """The refusal the previewed request would meet, word for word."""

    status: int
    message: str
    field: str | None = None


class Versions(_Model):
    """A driver version and an application version."""

    driver_version: str
    app_version: str


class PlannedAction(_Model):
    """An action a planned step runs."""

    name: str
    description: str | None = None


class PlannedStep(_Model):
    """A step the change's task will record, in order."""

    name: str
    description: str
    hook: Hook | None = None
    mode: Mode | None = None
    actions: list[PlannedAction] = []


class SkippedMode(_Model):
    """A hook mode that will not run, and why."""

    hook: Hook
    mode: Mode
    reason: str


class PlannedChange(_Model):
    """A change the request would record, with its plan."""

    type: TaskType
    revision: int
    driver_version: str
    app_version: str
    stopped_components: list[str] = []
    steps: list[PlannedStep] = []
    skipped: list[SkippedMode] = []


class ObjectDiff(_Model):
    """One rendered object: added, changed, removed or unchanged, with a unified diff (no secret value)."""

    kind: str
    name: str
    namespace: str | None = None
    change: str
    diff: str = ""
    diff_truncated: bool = False


class ComponentImages(_Model):
    """A component's images before and after, as ``get_component_images`` sees them."""

    component: str
    before: list[str] = []
    after: list[str] = []


class Preview(_Model):
    """What a change would do: its steps, the rendered diff, versions and configuration from and to."""

    deployment: str
    refusal: Refusal | None = None
    nothing_to_do: bool = False
    changes: list[PlannedChange] = []
    versions_from: Versions | None = None
    versions_to: Versions | None = None
    configuration_from: dict[str, Any] | None = None
    configuration_to: dict[str, Any] | None = None
    baseline_revision: int | None = None
    objects: list[ObjectDiff] = []
    images: list[ComponentImages] = []
    render_error: str | None = None
    notes: list[str] = []


class Revision(_Model):
    """One revision of a deployment: its change, versions, configuration (secrets concealed), task."""

    revision: int
    type: TaskType
    driver: str
    driver_version: str
    app_version: str
    configuration: dict[str, Any]
    requested_by: str
    requested_at: Time
    task_id: int | None = None
    task_status: TaskStatus | None = None
    task_error: str | None = None


class BackupHint(_Model):
    """A backup taken at a revision's versions: restore it when the driver refuses to go back."""

    backup_id: int
    revision: int
    app_version: str
    driver_version: str


class Rollback(_Model):
    """A rollback's change (none when there was nothing to do) and the backup to fall back on."""

    to_revision: int
    changes: list[Change] = []
    backup: BackupHint | None = None


class Applied(_Model):
    """What ``apply`` did: ``created``, ``changed`` or ``unchanged``, and the changes it recorded."""

    outcome: str
    changes: list[Change] = []


class LogLine(_Model):
    """A log line of one of a task's actions (redacted)."""

    step: int
    step_name: str
    action: str
    timestamp: Time
    level: str
    message: str


class StepOutput(_Model):
    """The stored end of a failed command's output on a step."""

    step: int
    step_name: str
    output_tail: str
    output_truncated: bool


class TaskLogs(_Model):
    """A page of a task's log lines; read on from ``next_offset`` until ``complete``."""

    task_id: int
    lines: list[LogLine] = []
    next_offset: int = 0
    complete: bool = False
    outputs: list[StepOutput] = []
    prefect_error: str | None = None
