"""The API's enumerations, apart from the models so that ``styrminctl`` starts without pydantic.

They repeat the server's (the SDK never imports it); ``tests/sdk/test_enums.py`` keeps them equal.
"""

from __future__ import annotations

from enum import StrEnum

# The hooks and modes are part of the driver format: the driver library defines them for the client
# and the server alike.
from styrmin_drivers.hooks import Hook as Hook
from styrmin_drivers.hooks import Mode as Mode


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
