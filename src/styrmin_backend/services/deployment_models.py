"""Read models of deployments: what the interfaces show of a deployment, never its row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from styrmin_backend.store.models import DeploymentRow


@dataclass(frozen=True)
class Deployment:
    """A deployment as asked for (versions, configuration, stopped components) and as the cluster
    last ran it; ``status`` is the stored one, the status rule's answer is read beside it."""

    id: int
    name: str
    namespace: str
    cluster: str
    driver_name: str
    driver_version: str
    app_version: str
    configuration: dict[str, Any]
    stopped_components: list[Any]
    running_app_version: str | None
    running_driver_version: str | None
    components_status: list[Any] | None
    components_status_at: datetime | None
    status: str
    last_revision: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: DeploymentRow) -> Deployment:
        return cls(
            id=row.id,
            name=row.name,
            namespace=row.namespace,
            cluster=row.cluster,
            driver_name=row.driver_name,
            driver_version=row.driver_version,
            app_version=row.app_version,
            configuration=dict(row.configuration),
            stopped_components=list(row.stopped_components or []),
            running_app_version=row.running_app_version,
            running_driver_version=row.running_driver_version,
            components_status=list(row.components_status) if row.components_status is not None else None,
            components_status_at=row.components_status_at,
            status=row.status,
            last_revision=row.last_revision,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
