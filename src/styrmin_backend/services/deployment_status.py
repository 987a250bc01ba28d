"""Deployment status: the facts the domain's rule needs, read from the store, and the rule applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.status import LatestChange, Status, StatusFacts, Versions, deployment_status
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.services.change_models import RequestedUpgrade, requested_change, stored_result
from styrmin_backend.store.models import ChangeRow, DeploymentRow, LatestTaskRow, TaskRow


class DeploymentVersions(Protocol):
    """What the status rule reads of a deployment (its row or its read model): the versions asked
    for and running, and the stopped components."""

    @property
    def id(self) -> int: ...
    @property
    def app_version(self) -> str: ...
    @property
    def driver_version(self) -> str: ...
    @property
    def running_app_version(self) -> str | None: ...
    @property
    def running_driver_version(self) -> str | None: ...
    @property
    def stopped_components(self) -> Sequence[str]: ...


# Built once, as the other statements of a task's claim and end are (see services.agents): each
# task's end reads it, and building it cost as much as running it.
# Only an upgrade's target is read from its change: the other changes' specs are not decrypted.
_LATEST_CHANGES = (
    select(TaskRow.id, TaskRow.deployment_id, TaskRow.type, TaskRow.status, ChangeRow.spec)
    .select_from(LatestTaskRow)
    .join(TaskRow, TaskRow.id == LatestTaskRow.task_id)
    .outerjoin(ChangeRow, and_(ChangeRow.id == TaskRow.change_id, TaskRow.type == TaskType.UPGRADE.value))
    .where(LatestTaskRow.deployment_id.in_(bindparam("deployment_ids", expanding=True)))
)


def latest_changes(
    session: Session, deployment_ids: Sequence[int]
) -> dict[int, dict[TaskType, LatestChange]]:
    """The latest task of each type that users requested (not actions' linked ones), per deployment.

    One row per deployment and type (``latest_tasks``, which a trigger on ``tasks`` keeps; see
    migration 0009), however many tasks each deployment had.
    """
    if not deployment_ids:
        return {}
    rows = session.execute(_LATEST_CHANGES, {"deployment_ids": list(deployment_ids)})
    upgrade = TaskType.UPGRADE.value
    found: dict[int, dict[TaskType, LatestChange]] = {i: {} for i in deployment_ids}
    for task_id, deployment_id, type_, status, spec in rows:
        requested = requested_change(type_, spec) if type_ == upgrade and spec else None
        target = requested.app_version if isinstance(requested, RequestedUpgrade) else None
        found[deployment_id][TaskType(type_)] = LatestChange(
            task_id, TaskType(type_), TaskStatus(status), target or None
        )
    return found


def status_facts(row: DeploymentVersions, latest: dict[TaskType, LatestChange]) -> StatusFacts:
    """What the rule decides ``row``'s status from."""
    running = None
    if row.running_app_version or row.running_driver_version:
        running = Versions(
            row.running_app_version or row.app_version, row.running_driver_version or row.driver_version
        )
    return StatusFacts(
        wanted=Versions(row.app_version, row.driver_version),
        running=running,
        stopped_components=tuple(sorted(row.stopped_components or [])),
        latest=latest,
    )


def facts_of(session: Session, row: DeploymentVersions) -> StatusFacts:
    """The facts of one deployment, read now."""
    return status_facts(row, latest_changes(session, [row.id])[row.id])


def status_of(session: Session, row: DeploymentVersions) -> Status:
    """The status of one deployment."""
    return deployment_status(facts_of(session, row))


def statuses_of(session: Session, rows: Sequence[DeploymentVersions]) -> dict[int, Status]:
    """The status of each deployment in ``rows``, by id (one query for all)."""
    latest = latest_changes(session, [row.id for row in rows])
    return {row.id: deployment_status(status_facts(row, latest[row.id])) for row in rows}


def refresh_status(session: Session, row: DeploymentRow) -> Status:
    """Store the deployment's status (lists filter on it) after a change was recorded or ended."""
    session.flush()
    status = status_of(session, row)
    if row.status != status.state.value:
        row.status = status.state.value
        row.updated_at = utcnow()
    return status


_LATER_ENDED_CHANGE = (
    select(TaskRow.id)
    .where(
        TaskRow.deployment_id == bindparam("deployment_id"),
        TaskRow.revision > bindparam("revision"),
        TaskRow.status.in_([status.value for status in TaskStatus if status.ended]),
        or_(TaskRow.parent_task_id.is_(None), TaskRow.parent_task_id != bindparam("task_id")),
    )
    .limit(1)
)
"""A change of the deployment after a given revision that has ended, not one the ending task started."""


def record_task_end(session: Session, task: TaskRow) -> None:
    """After ``task`` ended: note what the cluster now runs, then store the deployment's status."""
    deployment = session.get(DeploymentRow, task.deployment_id) if task.deployment_id else None
    if deployment is None or task.revision is None:
        return
    # What runs follows the latest change that ended: an earlier change ending late does not undo it.
    # Tasks this task's actions started end before it does and are part of it: its end decides.
    later = session.scalar(
        _LATER_ENDED_CHANGE,
        {"deployment_id": deployment.id, "revision": task.revision, "task_id": task.id},
    )
    applied = stored_result(task.result).applied
    if task.status == TaskStatus.SUCCEEDED.value and applied is not None and later is None:
        deployment.running_app_version = applied.app_version
        deployment.running_driver_version = applied.driver_version
    deployment.updated_at = utcnow()
    refresh_status(session, deployment)
