"""Read models of deployments: what the interfaces show of a deployment, never its row."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from styrmin_backend.services.read_model import ReadModel


class Deployment(ReadModel):
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
