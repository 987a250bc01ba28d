"""The backup storage location of each cluster: read by every signed-in user, set by an administrator."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Literal

from fastapi import Path
from pydantic import BaseModel, Field

from styrmin_backend.api.deps import Admin, Db, Reader, api_router
from styrmin_backend.api.schemas import Answer, Strict
from styrmin_backend.domain.backup_locations import LocationStatus, check_location
from styrmin_backend.services import backup_locations
from styrmin_backend.services.backup_locations import StoredLocation

router = api_router(tags=["backups"])
ClusterName = Annotated[str, Path(max_length=64)]


class BackupLocationOut(Answer):
    """A location as set: where, never credentials (only the Secret that holds them)."""

    id: int
    cluster: str
    kind: Literal["folder", "s3"]
    description: str = Field(description="The location in one line, e.g. s3://bucket/prefix at URL.")
    folder: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    secret: str | None = Field(
        default=None, description="NAMESPACE/NAME of the Kubernetes Secret holding the credentials."
    )
    status: LocationStatus = Field(description="checking until the cluster's agent has checked it.")
    error: str | None = Field(default=None, description="What failed in the check.")
    requested_by: str
    requested_at: datetime
    checked_at: datetime | None

    @classmethod
    def of(cls, stored: StoredLocation) -> BackupLocationOut:
        """The location as set, its stored form read through the domain's ``BackupLocation``."""
        where = stored.where
        return cls.model_validate(
            {
                **dict(stored),
                **asdict(where),
                "kind": where.kind.value,
                "description": where.describe(),
                "secret": where.secret_reference,
            }
        )


class ClusterBackupLocationOut(BaseModel):
    cluster: str
    in_use: BackupLocationOut | None = Field(
        description="The location new backups use; null: the agent's own folder (STYRMIN_AGENT_BACKUP_DIR)."
    )
    latest: BackupLocationOut | None = Field(
        description="A newer location set since, still being checked or failed (then not used)."
    )


class BackupLocationRequest(Strict):
    kind: Literal["folder", "s3"]
    folder: str | None = Field(default=None, max_length=400, description="kind folder: an absolute path.")
    bucket: str | None = Field(default=None, max_length=63)
    prefix: str | None = Field(
        default=None, max_length=200, description="Inside the bucket, e.g. styrmin/prod."
    )
    endpoint_url: str | None = Field(
        default=None, max_length=300, description="An S3-compatible server's URL; leave out for AWS."
    )
    region: str | None = Field(default=None, max_length=32)
    secret: str | None = Field(
        default=None,
        max_length=317,
        description="NAMESPACE/NAME of a Kubernetes Secret of the cluster with the keys access_key_id "
        "and secret_access_key. Styrmin keeps only this reference.",
    )


def _cluster_location(db: Db, cluster: str) -> ClusterBackupLocationOut:
    found = backup_locations.location_of(db, cluster)
    return ClusterBackupLocationOut(
        cluster=cluster,
        in_use=BackupLocationOut.of(found.in_use) if found.in_use else None,
        latest=BackupLocationOut.of(found.latest) if found.latest else None,
    )


@router.get("/clusters/{cluster}/backup-location", response_model=ClusterBackupLocationOut)
def get_backup_location(cluster: ClusterName, db: Db, _: Reader) -> ClusterBackupLocationOut:
    """Where the cluster's backups are stored, and a newer location being checked or that failed."""
    return _cluster_location(db, cluster)


@router.put("/clusters/{cluster}/backup-location", response_model=BackupLocationOut, status_code=202)
def set_backup_location(
    cluster: ClusterName, body: BackupLocationRequest, db: Db, principal: Admin
) -> BackupLocationOut:
    """Set the cluster's backup location: its agent checks it (writes, reads and deletes a probe
    object) and new backups use it once ready. Poll the GET until it is ready or failed."""
    location = check_location(
        body.kind,
        folder=body.folder,
        bucket=body.bucket,
        prefix=body.prefix,
        endpoint_url=body.endpoint_url,
        region=body.region,
        secret=body.secret,
    )
    return BackupLocationOut.of(backup_locations.set_location(db, cluster, location, by=principal))
