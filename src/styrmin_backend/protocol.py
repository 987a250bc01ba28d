"""The messages between the server and its agents: a claimed change, a task's result, a component's status.

Both sides use these models: the server's agent routes answer and accept them (so the OpenAPI document
shows them), and the agent parses them. The server decides what a change moves the deployment to
(its :class:`Target`) once, when the agent claims it; the agent carries it out.

This module imports nothing of the store, the services or the agent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, TypeAdapter

from styrmin_backend.domain.plan import ChangeFacts, DeclaredAction, Plan, decide
from styrmin_backend.domain.tasks import TaskType
from styrmin_drivers.spec import DriverSpec

# --- a claimed change ------------------------------------------------------------------------


class Target(BaseModel):
    """What a change moves the deployment to, as the server resolved it when the agent claimed it."""

    driver_version: str
    app_version: str
    current_app_version: str | None = Field(
        description="The application version the cluster runs before the change; null on create."
    )
    configuration: dict[str, Any] = Field(
        description="The configuration to apply (values, images, env), with its secrets: only for the agent."
    )
    stopped_components: list[str] = Field(description="Components kept at zero replicas.")


class _Change(BaseModel):
    target: Target


class CreateChange(_Change):
    """Install a new deployment: setup hook, then the chart."""

    type: Literal[TaskType.CREATE] = TaskType.CREATE


class UpgradeChange(_Change):
    """Move the deployment to another application and/or driver version."""

    type: Literal[TaskType.UPGRADE] = TaskType.UPGRADE
    from_app_version: str
    from_driver_version: str
    run_hooks: bool = Field(
        default=True,
        description="False for an upgrade an action asked for: the target is applied through Helm only.",
    )


class ConfigureChange(_Change):
    """Apply a new configuration, without hooks."""

    type: Literal[TaskType.CONFIGURE] = TaskType.CONFIGURE


class StopChange(_Change):
    """Scale components to zero replicas."""

    type: Literal[TaskType.STOP] = TaskType.STOP
    components: list[str]


class StartChange(_Change):
    """Scale stopped components back to their configured replicas."""

    type: Literal[TaskType.START] = TaskType.START
    components: list[str]


class DeleteChange(_Change):
    """Uninstall the deployment."""

    type: Literal[TaskType.DELETE] = TaskType.DELETE


_LOCATION = Field(
    default=None,
    description="The backup storage location (a folder, or a bucket with only the reference of the Secret "
    "holding its keys); null: the agent's own folder.",
)


class BackupChange(_Change):
    """Run the backup hook into the backup's folder, then record (and upload) its files."""

    type: Literal[TaskType.BACKUP] = TaskType.BACKUP
    backup_id: int
    key: str = Field(description="The backup's folder name in the backup storage location.")
    location: dict[str, Any] | None = _LOCATION


class BackupFileRecord(BaseModel):
    """A file of a backup, as the agent recorded it."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    size: StrictInt = Field(ge=0)
    sha256: Annotated[str, StringConstraints(min_length=64, max_length=64)]


class RestoreChange(_Change):
    """Check a backup's files, bring the backup's version back, then run the restore hook.

    Its target is the backup's versions and configuration.
    """

    type: Literal[TaskType.RESTORE] = TaskType.RESTORE
    backup_id: int
    key: str
    location: dict[str, Any] | None = _LOCATION
    files: list[BackupFileRecord]
    from_app_version: str
    from_driver_version: str
    restores_configuration: bool = Field(
        default=False, description="Whether the deployment's configuration differs from the backup's."
    )


class DeleteBackupChange(_Change):
    """Delete a backup's files from the location they were written to."""

    type: Literal[TaskType.DELETE_BACKUP] = TaskType.DELETE_BACKUP
    backup_id: int
    key: str
    location: dict[str, Any] | None = _LOCATION
    status_before: str = Field(description="The backup's status before its deletion was requested.")


Change = Annotated[
    CreateChange
    | UpgradeChange
    | ConfigureChange
    | StopChange
    | StartChange
    | DeleteChange
    | BackupChange
    | RestoreChange
    | DeleteBackupChange,
    Field(discriminator="type"),
]
"""A claimed change, by its type."""

CHANGE_ADAPTER: TypeAdapter[Change] = TypeAdapter(Change)


def change_facts(change: Change) -> ChangeFacts:
    """What the plan (``domain.plan.decide``) reads of a claimed change: the agent runs that plan, a
    preview shows it."""
    target = change.target
    facts = ChangeFacts(change.type, target.app_version, target.driver_version)
    if isinstance(change, UpgradeChange):
        return ChangeFacts(
            change.type,
            target.app_version,
            target.driver_version,
            from_app_version=change.from_app_version,
            from_driver_version=change.from_driver_version,
            run_hooks=change.run_hooks,
        )
    if isinstance(change, StopChange | StartChange):
        return ChangeFacts(
            change.type, target.app_version, target.driver_version, components=tuple(change.components)
        )
    if isinstance(change, RestoreChange):
        return ChangeFacts(
            change.type,
            target.app_version,
            target.driver_version,
            from_app_version=change.from_app_version,
            from_driver_version=change.from_driver_version,
            restores_configuration=change.restores_configuration,
        )
    return facts


def declared_actions(spec: DriverSpec) -> list[DeclaredAction]:
    """The actions a driver version declares, as the plan reads them."""
    return [DeclaredAction(a.name, a.hook, a.mode, a.description) for a in spec.spec.actions]


_NEEDS_ACTIONS = frozenset({TaskType.CREATE, TaskType.UPGRADE, TaskType.BACKUP, TaskType.RESTORE})


def plan_needs_actions(change: Change) -> bool:
    """Whether the plan of ``change`` depends on its driver's actions (an upgrade an action asked for,
    a stop or a start runs no hook): without them, :func:`plan_change` needs no driver spec."""
    if isinstance(change, UpgradeChange) and not change.run_hooks:
        return False
    return change.type in _NEEDS_ACTIONS


def plan_change(change: Change, spec: DriverSpec | None) -> Plan:
    """The plan of a claimed change, from the actions its driver version declares; ``spec`` may be
    None when :func:`plan_needs_actions` says the plan does not read it.

    Raises:
        UnplannableChange: for a kind of change no plan covers.
    """
    actions = declared_actions(spec) if spec is not None and plan_needs_actions(change) else []
    return decide(change_facts(change), actions)


FIRST_STEP_AT_CLAIM = frozenset(
    {TaskType.CREATE, TaskType.CONFIGURE, TaskType.UPGRADE, TaskType.STOP, TaskType.START, TaskType.DELETE}
)
"""The changes whose first step the server starts with the claim, for an agent that asks (its
``plan_version``): the agent does nothing of its own before that step. A backup, a restore and a
backup's deletion first open their storage location, whose failure ends the task before any step."""


class ClaimedStep(BaseModel):
    """A step the server started with the claim: the first of the task's plan."""

    id: int
    name: str


class ClaimedHelmLock(BaseModel):
    """The Helm lock of the deployment's release, taken with the claim for a task whose first step is
    a Helm operation (``ClaimRequest.helm_lock_lease_seconds``): the task holds it from the claim on,
    renews it, and lets go of it as it would one it took itself."""

    namespace: str
    release: str


class ClaimedTaskRef(BaseModel):
    """The claimed task, as far as the agent needs it."""

    id: int
    revision: int | None
    parent_task_id: int | None = None


class ClaimedDeployment(BaseModel):
    """The deployment a claimed change is for, as far as the agent needs it."""

    id: int
    name: str
    namespace: str
    cluster: str
    driver: str


class Claim(BaseModel):
    """A task the agent claimed: the change to carry out, for which deployment, and the actions' token."""

    task: ClaimedTaskRef
    change_type: TaskType
    change: Change
    deployment: ClaimedDeployment
    actions_token: str
    styrmin_url: str
    first_step: ClaimedStep | None = None
    """The plan's first step, started by the server (one call less per task); None when the agent
    starts it (see ``FIRST_STEP_AT_CLAIM``)."""
    helm_lock: ClaimedHelmLock | None = None
    """The release's Helm lock, taken with the claim (one call less per Helm operation); None when
    the agent takes it itself."""

    @property
    def task_id(self) -> int:
        return self.task.id

    @property
    def revision(self) -> int:
        return self.task.revision or 0


# --- a task's result ----------------------------------------------------------------------------


class AppliedVersions(BaseModel):
    """The versions the agent applied to the cluster."""

    model_config = ConfigDict(extra="forbid")

    app_version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    driver_version: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class BackupRecord(BaseModel):
    """Where a backup's files are and which the backup hook's actions wrote."""

    model_config = ConfigDict(extra="forbid")

    location: Annotated[str, StringConstraints(max_length=512)]
    files: list[BackupFileRecord] = Field(max_length=10_000)


class DeletedBackup(BaseModel):
    """Which backup's files a deletion removed, and from where."""

    model_config = ConfigDict(extra="forbid")

    location: Annotated[str, StringConstraints(max_length=512)]
    key: Annotated[str, StringConstraints(max_length=512)]


class TaskResult(BaseModel):
    """What a task the agent ran did, as it reports it when the task ends."""

    model_config = ConfigDict(extra="forbid")

    applied: AppliedVersions | None = Field(
        default=None, description="The versions applied to the cluster; absent when none were."
    )
    backup: BackupRecord | None = Field(default=None, description="A backup task's files.")
    deleted: DeletedBackup | None = Field(default=None, description="A backup deletion's files.")

    def as_json(self) -> dict[str, Any]:
        """The result as stored on the task (absent parts left out)."""
        return self.model_dump(mode="json", exclude_none=True)


# --- a component's status -----------------------------------------------------------------------


class ComponentStatus(BaseModel):
    """A component's workload as the agent saw it in the cluster."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    kind: Annotated[str, StringConstraints(min_length=1, max_length=32)]
    workload: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    replicas: StrictInt = Field(ge=0)
    ready_replicas: StrictInt = Field(ge=0)
    images: list[Annotated[str, StringConstraints(max_length=512)]] = Field(max_length=64)


# --- the Helm operation lock -------------------------------------------------------------------


class HelmLockRequest(BaseModel):
    """Take, renew or let go of the lock of one release's Helm operation, for a task the agent runs."""

    model_config = ConfigDict(extra="forbid")

    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    release: Annotated[str, StringConstraints(min_length=1, max_length=53)]
    lease_seconds: StrictInt = Field(default=60, ge=5, le=3600)


class HelmLockAnswer(BaseModel):
    """Whether the task holds the lock now, and which task does (itself when it got it)."""

    acquired: bool
    holder_task_id: int
