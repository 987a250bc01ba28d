"""Deployments: reading them, and recording the changes the agent carries out."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request, Response

from styrmin_backend.api.deps import Db, Reader, Writer, api_router
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.schemas import (
    ChangeOut,
    ComponentsRequest,
    ConfigurationIn,
    DeploymentCreateRequest,
    DeploymentOut,
    TaskSummary,
    UpgradeRequest,
)
from styrmin_backend.domain.status import DeploymentStatus
from styrmin_backend.services import changes, deployment_status
from styrmin_backend.services.deployment_models import Deployment

router = api_router(tags=["deployments"])


def deployment_out(db: Db, row: Deployment) -> DeploymentOut:
    """One deployment with its status as the status rule decides it."""
    return DeploymentOut.of(row, deployment_status.status_of(db, row))


def change_out(db: Db, recorded: changes.Recorded) -> ChangeOut:
    """A recorded change: the deployment as it is now, and the task that carries the change out."""
    return ChangeOut(
        deployment=deployment_out(db, recorded.deployment),
        task=TaskSummary.model_validate(recorded.task) if recorded.task else None,
    )


@router.get("/deployments", response_model=list[DeploymentOut])
def list_deployments(
    db: Db,
    _: Reader,
    request: Request,
    response: Response,
    status: Annotated[
        DeploymentStatus | None, Query(description="Only deployments with this status.")
    ] = None,
    driver: Annotated[
        str | None, Query(max_length=64, description="Only deployments of this driver.")
    ] = None,
    cluster: Annotated[
        str | None, Query(max_length=64, description="Only deployments on this cluster.")
    ] = None,
    limit: Limit = 500,
    cursor: Cursor = None,
) -> list[DeploymentOut]:
    """Every deployment by name, or those with the status, driver and cluster given."""
    rows = changes.list_deployments(db)
    statuses = deployment_status.statuses_of(db, rows)
    found = [
        DeploymentOut.of(row, statuses[row.id])
        for row in rows
        if (driver is None or row.driver_name == driver) and (cluster is None or row.cluster == cluster)
    ]
    found = [d for d in found if status is None or d.status == status]
    return page_of(found, lambda d: d.name, limit=limit, cursor=cursor, request=request, response=response)


@router.get("/deployments/{name}", response_model=DeploymentOut)
def get_deployment(name: str, db: Db, _: Reader) -> DeploymentOut:
    """One deployment with its configuration."""
    return deployment_out(db, changes.read_deployment(db, name))


@router.post("/deployments", response_model=ChangeOut, status_code=202)
def create_deployment(body: DeploymentCreateRequest, db: Db, principal: Writer) -> ChangeOut:
    """Create a deployment: records the create change and its pending task."""
    return change_out(
        db,
        changes.create_deployment(
            db,
            by=principal,
            name=body.name,
            namespace=body.namespace,
            driver_name=body.driver,
            driver_version=body.driver_version,
            app_version=body.app_version,
            configuration=body.configuration.to_domain(),
            cluster=body.cluster,
        ),
    )


@router.post("/deployments/{name}/upgrade", response_model=ChangeOut, status_code=202)
def upgrade_deployment(name: str, body: UpgradeRequest, db: Db, principal: Writer) -> ChangeOut:
    """Upgrade the application and/or driver version; no task when the deployment already runs them."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    return change_out(
        db,
        changes.upgrade_deployment(
            db,
            name,
            by=principal,
            app_version=body.app_version,
            driver_version=body.driver_version,
            origin=origin,
        ),
    )


@router.put("/deployments/{name}/configuration", response_model=ChangeOut, status_code=202)
def configure_deployment(name: str, body: ConfigurationIn, db: Db, principal: Writer) -> ChangeOut:
    """Replace the configuration (values, image overrides, env vars)."""
    return change_out(
        db, changes.configure_deployment(db, name, by=principal, configuration=body.to_domain())
    )


@router.post("/deployments/{name}/stop", response_model=ChangeOut, status_code=202)
def stop_components(name: str, body: ComponentsRequest, db: Db, principal: Writer) -> ChangeOut:
    """Stop components: scale their workloads to zero."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    return change_out(
        db,
        changes.set_components_running(
            db, name, by=principal, components=body.components, running=False, origin=origin
        ),
    )


@router.post("/deployments/{name}/start", response_model=ChangeOut, status_code=202)
def start_components(name: str, body: ComponentsRequest, db: Db, principal: Writer) -> ChangeOut:
    """Start components again at their configured replicas."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    return change_out(
        db,
        changes.set_components_running(
            db, name, by=principal, components=body.components, running=True, origin=origin
        ),
    )


@router.delete("/deployments/{name}", response_model=ChangeOut, status_code=202)
def delete_deployment(name: str, db: Db, principal: Writer) -> ChangeOut:
    """Delete a deployment: the agent uninstalls it."""
    return change_out(db, changes.delete_deployment(db, name, by=principal))
