"""SQLAlchemy tables of the control plane (the schema itself lives in the Alembic migrations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from styrmin_backend.store.secret_box import EncryptedChangeSpec, EncryptedConfiguration

# BigInteger ids on PostgreSQL, INTEGER PRIMARY KEY (rowid) on SQLite.
Id = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back aware (SQLite would hand back naive times)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("Styrmin stores aware datetimes only")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Base of every table."""

    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: UTCDateTime()}


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str | None] = mapped_column(String(255))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    is_builtin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]

    @property
    def has_password(self) -> bool:
        """Whether the user has a password (built-in users have none), never which."""
        return self.password_hash is not None


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128), default="")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    # For a styrmin-actions token: the task of the reconciliation it was made for.
    task_id: Mapped[int | None] = mapped_column(Id)


class AgentRow(Base):
    __tablename__ = "agents"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    cluster: Mapped[str] = mapped_column(String(64))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    last_seen_at: Mapped[datetime | None]


class AgentInstanceRow(Base):
    """A running process of an agent (its instance), while it holds its presence connection open.

    ``connection`` counts the instance's connections: when one closes, the server that held it
    knows the instance came back (on any server) if the count moved on (see services.agents).
    """

    __tablename__ = "agent_instances"

    agent_id: Mapped[int] = mapped_column(
        Id, ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    instance: Mapped[str] = mapped_column(String(64), primary_key=True)
    connection: Mapped[int] = mapped_column(Integer)
    connected_at: Mapped[datetime]
    seen_at: Mapped[datetime | None]
    """When the server holding its presence connection last noted it (its connection or a heartbeat)."""


class DriverRow(Base):
    __tablename__ = "drivers"
    __table_args__ = (UniqueConstraint("name", "version"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(64))
    checksum: Mapped[str] = mapped_column(String(80))
    spec: Mapped[dict[str, Any]]
    archive: Mapped[bytes] = mapped_column(LargeBinary)
    pushed_by: Mapped[str] = mapped_column(String(64))
    pushed_at: Mapped[datetime]


class DeploymentRow(Base):
    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(53), unique=True)
    namespace: Mapped[str] = mapped_column(String(63))
    cluster: Mapped[str] = mapped_column(String(64), default="local")
    driver_name: Mapped[str] = mapped_column(String(64))
    driver_version: Mapped[str] = mapped_column(String(64))
    app_version: Mapped[str] = mapped_column(String(64))
    configuration: Mapped[dict[str, Any]] = mapped_column(EncryptedConfiguration)
    stopped_components: Mapped[list[Any]]
    # What the cluster runs, as the agent last applied it (the columns above are what was asked for).
    running_app_version: Mapped[str | None] = mapped_column(String(64))
    running_driver_version: Mapped[str | None] = mapped_column(String(64))
    # The component workloads as the agent last saw them in the cluster, and when.
    components_status: Mapped[list[Any] | None]
    components_status_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16))
    last_revision: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ChangeRow(Base):
    __tablename__ = "changes"
    __table_args__ = (UniqueConstraint("deployment_id", "revision"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(EncryptedChangeSpec)
    requested_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_deployment_id_id", "deployment_id", "id"),
        Index("ix_tasks_status_id", "status", "id"),
        Index("ix_tasks_cluster_status_id", "cluster", "status", "id"),
        Index("ix_tasks_type_status", "type", "status"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    deployment_id: Mapped[int | None] = mapped_column(ForeignKey("deployments.id", ondelete="SET NULL"))
    deployment_name: Mapped[str] = mapped_column(String(53))
    change_id: Mapped[int | None] = mapped_column(ForeignKey("changes.id", ondelete="SET NULL"))
    revision: Mapped[int | None] = mapped_column(Integer)
    requested_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None]
    parent_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="SET NULL"), index=True
    )
    # No foreign key: tasks and steps would reference each other; the service keeps this consistent.
    parent_step_id: Mapped[int | None] = mapped_column(Id, index=True)
    cluster: Mapped[str] = mapped_column(String(64), default="local", server_default="local")
    claimed_by: Mapped[int | None] = mapped_column(ForeignKey("agents.id", ondelete="SET NULL"))
    # The process of that agent that claimed it (its instance), when the agent said.
    claimed_by_instance: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    actions_token_id: Mapped[int | None] = mapped_column(Id)
    cancelled_by: Mapped[str | None] = mapped_column(String(64))
    cancelled_at: Mapped[datetime | None]
    # For a cancelled task: when its work stopped (at once for a pending one; when its agent said so).
    stopped_at: Mapped[datetime | None]
    # While a running task waits for the Helm operation of another task on its release: that task.
    waits_for_helm_of_task_id: Mapped[int | None] = mapped_column(Id)


class LatestTaskRow(Base):
    """The newest task users requested of each type, per deployment: what its status is decided from.

    Written by a trigger on ``tasks`` at each requested task's insert (migration 0009), never by
    the services: a server of the previous version, still serving during a rolling upgrade, keeps
    it too. A list of deployments reads one row per deployment and type, however long their
    histories grow.
    """

    __tablename__ = "latest_tasks"

    deployment_id: Mapped[int] = mapped_column(
        Id, ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True
    )
    type: Mapped[str] = mapped_column(String(16), primary_key=True)
    task_id: Mapped[int] = mapped_column(Id, ForeignKey("tasks.id", ondelete="CASCADE"))


class HelmLockRow(Base):
    """The Helm operation running now on one release: Helm allows one at a time per release.

    Held by a task (through its agent) for as long as the operation lasts, with a lease its agent
    renews; a lock whose lease ran out (its agent crashed) is free.
    """

    __tablename__ = "helm_locks"

    release_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    deployment_name: Mapped[str] = mapped_column(String(53))
    holder_task_id: Mapped[int] = mapped_column(Id)
    holder_agent_id: Mapped[int] = mapped_column(Id)
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class StepRow(Base):
    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_task_id_position", "task_id", "position"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    output_tail: Mapped[str | None] = mapped_column(Text)
    output_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    notes: Mapped[list[Any]]
    flow_run_id: Mapped[str | None] = mapped_column(String(64))


class BackupLocationRow(Base):
    """A storage location an administrator set for a cluster, and how its check went.

    The newest ready row of a cluster is the location its backups use; rows are kept, as the backups
    written to them are read from there.
    """

    __tablename__ = "backup_locations"
    __table_args__ = (Index("ix_backup_locations_cluster_id", "cluster", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64))
    location: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(64))
    requested_at: Mapped[datetime]
    checked_at: Mapped[datetime | None]


class BackupScheduleRow(Base):
    """A deployment's backup schedule: when to take a backup and which scheduled ones to keep."""

    __tablename__ = "backup_schedules"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), unique=True)
    cron: Mapped[str] = mapped_column(String(100))
    keep_count: Mapped[int | None] = mapped_column(Integer)
    keep_days: Mapped[int | None] = mapped_column(Integer)
    # Moved forward by the server that starts the due backup, in the same statement that checks it:
    # of several servers, only one sees its update apply.
    next_run_at: Mapped[datetime] = mapped_column(index=True)
    last_started_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    updated_by: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime]


class BackupRow(Base):
    __tablename__ = "backups"
    __table_args__ = (Index("ix_backups_deployment_id_id", "deployment_id", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"))
    deployment_name: Mapped[str] = mapped_column(String(53))
    driver_name: Mapped[str] = mapped_column(String(64))
    driver_version: Mapped[str] = mapped_column(String(64))
    app_version: Mapped[str] = mapped_column(String(64))
    revision: Mapped[int] = mapped_column(Integer)
    configuration: Mapped[dict[str, Any]] = mapped_column(EncryptedConfiguration)
    # The storage location as the agent described it when the backup was taken, and the folder inside it.
    location: Mapped[str] = mapped_column(String(512))
    key: Mapped[str] = mapped_column(String(255))
    # The cluster's location the backup was written to; None: the agent's own folder.
    location_id: Mapped[int | None] = mapped_column(ForeignKey("backup_locations.id", ondelete="RESTRICT"))
    files: Mapped[list[Any]]
    status: Mapped[str] = mapped_column(String(16))
    label: Mapped[str] = mapped_column(String(16))
    requested_by: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)


class LoginFailureRow(Base):
    """Failed logins counted under one key (a user name and address, or an address): see login_throttle."""

    __tablename__ = "login_failures"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    last_failed_at: Mapped[datetime]
    blocked_until: Mapped[datetime | None]
