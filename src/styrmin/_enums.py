"""The API's enumerations, apart from the models so that ``styrminctl`` starts without pydantic."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A user's role: Admin > Read/write > Read-only."""

    ADMIN = "admin"
    READ_WRITE = "read-write"
    READ_ONLY = "read-only"


class TaskType(StrEnum):
    """The kind of change a task carries out."""

    CREATE = "create"
    CONFIGURE = "configure"
    UPGRADE = "upgrade"
    STOP = "stop"
    START = "start"
    BACKUP = "backup"
    RESTORE = "restore"
    DELETE = "delete"
    DELETE_BACKUP = "delete-backup"


class TaskStatus(StrEnum):
    """Where a task (or a step) is in its life."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        """Whether it has ended (succeeded, failed or cancelled)."""
        return self in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)


StepStatus = TaskStatus


class DeploymentStatus(StrEnum):
    """What a deployment is doing (the status rule is in docs/api.md)."""

    DEPLOYING = "deploying"
    RUNNING = "running"
    UPGRADE_FAILED = "upgrade-failed"
    STOPPED = "stopped"
    FAILED = "failed"
    DELETING = "deleting"
    DELETED = "deleted"


class Hook(StrEnum):
    """A point in the deployment lifecycle where a driver's actions run."""

    SETUP = "setup"
    UPGRADE = "upgrade"
    BACKUP = "backup"
    RESTORE = "restore"


class Mode(StrEnum):
    """When an action runs within its hook: before, as, or after the main operation."""

    PRE = "pre"
    CORE = "core"
    POST = "post"
