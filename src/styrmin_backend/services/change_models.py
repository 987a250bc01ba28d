"""A requested change as the server stores it, and a task's result as it is stored: one typed shape each.

A change is stored in ``ChangeRow`` (its kind in ``type``, the rest in ``spec``); :func:`requested_change`
reads it back as one :data:`RequestedChange`, discriminated by its kind, and
:meth:`_Requested.stored` writes it. The stored key names are those rows have always had
(``to_app_version``, ...), so rows written by earlier versions load, and earlier servers read new rows.
When the agent claims a change, ``changes.claimed_change`` adds the target it moves the deployment to,
giving the claim's :data:`styrmin_backend.protocol.Change`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from styrmin_backend.domain.plan import ChangeFacts
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.protocol import AppliedVersions, BackupFileRecord, BackupRecord, DeletedBackup
from styrmin_backend.store.models import ChangeRow


class _Requested(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    configuration: dict[str, Any] | None = Field(
        default=None, description="The configuration the change applies; None: the deployment's."
    )

    def stored(self) -> dict[str, Any]:
        """The change's ``spec`` as stored (its kind is the row's ``type``)."""
        stored = self.model_dump(mode="json", by_alias=True, exclude={"type"})
        if stored["configuration"] is None:  # a change that keeps the deployment's stores none
            del stored["configuration"]
        return stored


class RequestedCreate(_Requested):
    """Install a new deployment at a driver and application version."""

    type: Literal[TaskType.CREATE] = TaskType.CREATE
    driver_version: str
    app_version: str


class RequestedUpgrade(_Requested):
    """Move the deployment from the versions the cluster runs to others."""

    type: Literal[TaskType.UPGRADE] = TaskType.UPGRADE
    from_app_version: str
    from_driver_version: str
    app_version: str = Field(
        validation_alias=AliasChoices("to_app_version", "app_version"), serialization_alias="to_app_version"
    )
    driver_version: str = Field(
        validation_alias=AliasChoices("to_driver_version", "driver_version"),
        serialization_alias="to_driver_version",
    )
    run_hooks: bool = True
    """False for an upgrade an action asked for: the target is applied through Helm only."""


class RequestedConfigure(_Requested):
    """Apply a new configuration."""

    type: Literal[TaskType.CONFIGURE] = TaskType.CONFIGURE


class RequestedStop(_Requested):
    """Scale components to zero replicas."""

    type: Literal[TaskType.STOP] = TaskType.STOP
    components: list[str]


class RequestedStart(_Requested):
    """Scale stopped components back to their configured replicas."""

    type: Literal[TaskType.START] = TaskType.START
    components: list[str]


class RequestedDelete(_Requested):
    """Uninstall the deployment."""

    type: Literal[TaskType.DELETE] = TaskType.DELETE


class RequestedBackup(_Requested):
    """Take a backup at the versions the deployment runs, into its storage location."""

    type: Literal[TaskType.BACKUP] = TaskType.BACKUP
    backup_id: int
    key: str
    driver_version: str | None = None
    app_version: str | None = None
    location: dict[str, Any] | None = None


class RequestedRestore(_Requested):
    """Restore a backup: its files, versions and configuration."""

    type: Literal[TaskType.RESTORE] = TaskType.RESTORE
    backup_id: int
    key: str
    location: dict[str, Any] | None = None
    files: list[BackupFileRecord] = Field(default_factory=list)
    driver_version: str
    app_version: str
    from_app_version: str
    from_driver_version: str
    restores_configuration: bool = False


class RequestedDeleteBackup(_Requested):
    """Delete a backup's files."""

    type: Literal[TaskType.DELETE_BACKUP] = TaskType.DELETE_BACKUP
    backup_id: int
    key: str = ""
    location: dict[str, Any] | None = None
    status_before: str | None = None


RequestedChange = Annotated[
    RequestedCreate
    | RequestedUpgrade
    | RequestedConfigure
    | RequestedStop
    | RequestedStart
    | RequestedDelete
    | RequestedBackup
    | RequestedRestore
    | RequestedDeleteBackup,
    Field(discriminator="type"),
]
"""A change a user (or an action) requested, by its kind."""

_REQUESTED: TypeAdapter[RequestedChange] = TypeAdapter(RequestedChange)


def requested_change(kind: str | TaskType, spec: dict[str, Any] | None) -> RequestedChange:
    """The change stored as ``type`` ``kind`` with ``spec`` (a row of any earlier version too)."""
    return _REQUESTED.validate_python({**(spec or {}), "type": TaskType(kind)})


def requested_of(change: ChangeRow) -> RequestedChange:
    """The change stored in row ``change``, typed."""
    return requested_change(change.type, change.spec)


class StartedTaskResult(BaseModel):
    """A task a step of this task started, with how it ended (part of the stored result)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: int
    type: str
    status: str
    step: str | None = None
    result: dict[str, Any] | None = None


class StoredTaskResult(BaseModel):
    """A task's result as stored: what the agent reported, and the tasks its steps started."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    applied: AppliedVersions | None = None
    backup: BackupRecord | None = None
    deleted: DeletedBackup | None = None
    started_tasks: list[StartedTaskResult] = Field(default_factory=list)


def stored_result(result: dict[str, Any] | None) -> StoredTaskResult:
    """A task's stored result, typed (empty when it has none)."""
    return StoredTaskResult.model_validate(result or {})


def change_facts_of(requested: RequestedChange) -> ChangeFacts:
    """What the plan of a requested change is decided from (``domain.plan.decide``), before any
    agent claims it: for a preview of the steps its task will record."""
    if isinstance(requested, RequestedCreate):
        return ChangeFacts(requested.type, requested.app_version, requested.driver_version)
    if isinstance(requested, RequestedUpgrade):
        return ChangeFacts(
            requested.type,
            requested.app_version,
            requested.driver_version,
            from_app_version=requested.from_app_version,
            from_driver_version=requested.from_driver_version,
            run_hooks=requested.run_hooks,
        )
    if isinstance(requested, RequestedStop | RequestedStart):
        return ChangeFacts(requested.type, components=tuple(requested.components))
    if isinstance(requested, RequestedRestore):
        return ChangeFacts(
            requested.type,
            requested.app_version,
            requested.driver_version,
            from_app_version=requested.from_app_version,
            from_driver_version=requested.from_driver_version,
            restores_configuration=requested.restores_configuration,
        )
    return ChangeFacts(requested.type)
