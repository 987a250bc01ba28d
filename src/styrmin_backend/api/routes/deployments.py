"""Deployments: reading them, and recording the changes the agent carries out."""

from __future__ import annotations

from fastapi import APIRouter

from styrmin_backend.api.deps import Db, Reader, Writer
from styrmin_backend.api.schemas import (
    ChangeOut,
    ComponentsRequest,
    ConfigurationIn,
    DeploymentCreateRequest,
    DeploymentOut,
    TaskSummary,
    UpgradeRequest,
)
from styrmin_backend.services import changes

router = APIRouter(tags=["deployments"])


def _out(recorded: changes.Recorded) -> ChangeOut:
    return ChangeOut(
        deployment=DeploymentOut.of(recorded.deployment),
        task=TaskSummary.of(recorded.task) if recorded.task else None,
    )


@router.get("/deployments", response_model=list[DeploymentOut])
def list_deployments(db: Db, _: Reader) -> list[DeploymentOut]:
    """Every deployment."""
    return [DeploymentOut.of(row) for row in changes.list_deployments(db)]


@router.get("/deployments/{name}", response_model=DeploymentOut)
def get_deployment(name: str, db: Db, _: Reader) -> DeploymentOut:
    """One deployment with its configuration."""
    return DeploymentOut.of(changes.get_deployment(db, name))


@router.post("/deployments", response_model=ChangeOut, status_code=202)
def create_deployment(body: DeploymentCreateRequest, db: Db, principal: Writer) -> ChangeOut:
    """Create a deployment: records the create change and its pending task."""
    return _out(
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
        )
    )


@router.post("/deployments/{name}/upgrade", response_model=ChangeOut, status_code=202)
def upgrade_deployment(name: str, body: UpgradeRequest, db: Db, principal: Writer) -> ChangeOut:
    """Upgrade the application and/or driver version; no task when the deployment already runs them."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    return _out(
        changes.upgrade_deployment(
            db,
            name,
            by=principal,
            app_version=body.app_version,
            driver_version=body.driver_version,
            origin=origin,
        )
    )


@router.put("/deployments/{name}/configuration", response_model=ChangeOut, status_code=202)
def configure_deployment(name: str, body: ConfigurationIn, db: Db, principal: Writer) -> ChangeOut:
    """Replace the configuration (values, image overrides, env vars)."""
    return _out(changes.configure_deployment(db, name, by=principal, configuration=body.to_domain()))


@router.post("/deployments/{name}/stop", response_model=ChangeOut, status_code=202)
def stop_components(name: str, body: ComponentsRequest, db: Db, principal: Writer) -> ChangeOut:
    """Stop components: scale their workloads to zero."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    return _out(
        changes.set_components_running(
            db, name, by=principal, components=body.components, running=False, origin=origin
        )
    )


@router.post("/deployments/{name}/start", response_model=ChangeOut, status_code=202)
def start_components(name: str, body: ComponentsRequest, db: Db, principal: Writer) -> ChangeOut:
    """Start components again at their configured replicas."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    return _out(
        changes.set_components_running(
            db, name, by=principal, components=body.components, running=True, origin=origin
        )
    )


@router.delete("/deployments/{name}", response_model=ChangeOut, status_code=202)
def delete_deployment(name: str, db: Db, principal: Writer) -> ChangeOut:
    """Delete a deployment: the agent uninstalls it."""
    return _out(changes.delete_deployment(db, name, by=principal))
