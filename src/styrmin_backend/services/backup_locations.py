"""The backup storage location of each cluster: set by an administrator, checked by the cluster's agent.

Setting a location records it as checking; the cluster's agent writes, reads and deletes a probe object
there and reports how that went. The newest ready location of a cluster is the one its new backups
use; a location that failed its check changes nothing. A cluster without one uses its agent's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.backup_locations import BackupLocation, LocationStatus
from styrmin_backend.domain.deployments import check_cluster_name
from styrmin_backend.domain.errors import Conflict, NotFound
from styrmin_backend.services.principal import Principal
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.store.models import BackupLocationRow

MAX_CHECK_ERROR = 2000
"""How much of an agent's report on a failed check is kept."""


class StoredLocation(ReadModel):
    """A backup location as set for a cluster, and how its agent's check went."""

    id: int
    cluster: str
    location: dict[str, Any]
    status: str
    error: str | None
    requested_by: str
    requested_at: datetime
    checked_at: datetime | None

    @property
    def where(self) -> BackupLocation:
        """The location itself, read from its stored form."""
        return BackupLocation.from_json(self.location)


def _stored(row: BackupLocationRow | None) -> StoredLocation | None:
    return StoredLocation.model_validate(row) if row is not None else None


@dataclass(frozen=True)
class ClusterLocation:
    """The location a cluster's backups use now, and the newest one set, when it is another."""

    cluster: str
    in_use: StoredLocation | None
    latest: StoredLocation | None


def set_location(
    session: Session, cluster: str, location: BackupLocation, *, by: Principal
) -> StoredLocation:
    """Record ``location`` for ``cluster``, to be checked by its agent before backups use it."""
    check_cluster_name(cluster)
    row = BackupLocationRow(
        cluster=cluster,
        location=location.as_json(),
        status=LocationStatus.CHECKING.value,
        requested_by=by.username,
        requested_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return StoredLocation.model_validate(row)


def location_of(session: Session, cluster: str) -> ClusterLocation:
    """Where ``cluster``'s backups go now, and the newest location set for it."""
    check_cluster_name(cluster)
    in_use = location_in_use(session, cluster)
    latest = session.scalars(
        select(BackupLocationRow)
        .where(BackupLocationRow.cluster == cluster)
        .order_by(BackupLocationRow.id.desc())
    ).first()
    newer = latest if latest is not None and (in_use is None or latest.id != in_use.id) else None
    return ClusterLocation(cluster, in_use, _stored(newer))


def location_in_use(session: Session, cluster: str) -> StoredLocation | None:
    """The newest location of ``cluster`` that passed its check; None: the agent's own folder."""
    row = session.scalars(
        select(BackupLocationRow)
        .where(BackupLocationRow.cluster == cluster, BackupLocationRow.status == LocationStatus.READY.value)
        .order_by(BackupLocationRow.id.desc())
    ).first()
    return _stored(row)


def next_location_check(session: Session, cluster: str) -> StoredLocation | None:
    """The oldest location of ``cluster`` still waiting for its agent's check."""
    row = session.scalars(
        select(BackupLocationRow)
        .where(
            BackupLocationRow.cluster == cluster, BackupLocationRow.status == LocationStatus.CHECKING.value
        )
        .order_by(BackupLocationRow.id)
    ).first()
    return _stored(row)


def record_location_check(
    session: Session, cluster: str, location_id: int, error: str | None
) -> StoredLocation:
    """Record how the agent's check of a location went: ready, or failed with what failed."""
    row = session.get(BackupLocationRow, location_id)
    if row is None or row.cluster != cluster:
        raise NotFound(f"Cluster {cluster} has no backup location {location_id}.", field="location_id")
    if row.status != LocationStatus.CHECKING.value:
        raise Conflict(
            f"Backup location {location_id} was checked already ({row.status}).", field="location_id"
        )
    row.status = (LocationStatus.FAILED if error else LocationStatus.READY).value
    row.error = error[:MAX_CHECK_ERROR] if error else None
    row.checked_at = utcnow()
    return StoredLocation.model_validate(row)


def location_json(session: Session, location_id: int | None) -> dict[str, object] | None:
    """The stored location a backup used, as the agent reads it; None: the agent's own folder."""
    if location_id is None:
        return None
    row = session.get(BackupLocationRow, location_id)
    return dict(row.location) if row is not None else None
