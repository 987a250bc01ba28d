"""Previews of changes, apply (a deployment as a file says), revision history and rollback."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Request, Response
from pydantic import BaseModel, Field, StrictInt
from sqlalchemy.orm import Session

from styrmin_backend.api.deps import Db, Reader, Writer, api_router, authenticate_request, short_transaction
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.routes.deployments import change_out
from styrmin_backend.api.schemas import (
    MAX_ID,
    ChangeOut,
    ComponentName,
    ConfigurationIn,
    DeploymentCreateRequest,
    Name,
    Strict,
    UpgradeRequest,
    Version,
)
from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.domain.manifest_diff import ObjectChange
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import SECRET_SET, conceal_configuration
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.services import changes, desired_state, history, preview
from styrmin_backend.services.principal import Principal

router = api_router(tags=["deployments"])

DeploymentName = Annotated[str, Field(min_length=1, max_length=53)]


# --- requests ----------------------------------------------------------------------------------


class DesiredIn(Strict):
    """A deployment as it should be: the fields of a file ``styrminctl apply -f`` takes."""

    namespace: Annotated[str, Field(min_length=1, max_length=63)] | None = Field(
        default=None,
        description="On create; default: the deployment's name. A deployment keeps its namespace.",
    )
    cluster: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None, description='On create; default "local". A deployment keeps its cluster.'
    )
    driver: Name
    driver_version: Version
    app_version: Version | None = Field(
        default=None, description="Default: the driver's version on create, the current one otherwise."
    )
    configuration: ConfigurationIn = Field(
        default_factory=ConfigurationIn,
        description=f'The whole configuration; a secret given as "{SECRET_SET}" keeps the stored value.',
    )
    stopped_components: list[ComponentName] | None = Field(
        default=None, max_length=100, description="The components kept stopped; absent: as they are."
    )

    def to_desired(self, name: str) -> desired_state.DesiredDeployment:
        """The desired state the services take."""
        return desired_state.DesiredDeployment(
            name=name,
            driver_name=self.driver,
            driver_version=self.driver_version,
            namespace=self.namespace,
            cluster=self.cluster,
            app_version=self.app_version,
            configuration=self.configuration.to_domain(),
            stopped_components=self.stopped_components,
        )


class RollbackRequest(Strict):
    to_revision: StrictInt = Field(ge=1, le=MAX_ID, description="The revision to bring back.")


class CreatePreview(DeploymentCreateRequest):
    type: Literal["create"]
    name: Annotated[str, Field(min_length=1, max_length=53)] | None = Field(  # type: ignore[assignment]
        default=None, description="The path's name; if given, it must be the same."
    )


class UpgradePreview(UpgradeRequest):
    type: Literal["upgrade"]


class ConfigurePreview(Strict):
    type: Literal["configure"]
    configuration: ConfigurationIn


class RollbackPreview(RollbackRequest):
    type: Literal["rollback"]


class ApplyPreview(DesiredIn):
    type: Literal["apply"]


PreviewRequest = Annotated[
    CreatePreview | UpgradePreview | ConfigurePreview | RollbackPreview | ApplyPreview,
    Field(discriminator="type"),
]


# --- answers -----------------------------------------------------------------------------------


class RefusalOut(BaseModel):
    status: int = Field(description="The HTTP status the request would be answered with.")
    message: str = Field(description="The message it would carry, word for word.")
    field: str | None


class VersionsOut(BaseModel):
    driver_version: str
    app_version: str


class PlannedActionOut(BaseModel):
    name: str
    description: str | None


class PlannedStepOut(BaseModel):
    name: str = Field(description="The step's name, as the task will show it.")
    description: str
    hook: Hook | None
    mode: Mode | None
    actions: list[PlannedActionOut] = Field(description="The actions the step runs (one hook mode).")


class SkippedModeOut(BaseModel):
    hook: Hook
    mode: Mode
    reason: str


class PlannedChangeOut(BaseModel):
    type: TaskType
    revision: int = Field(description="The revision the change would get (if nothing else comes first).")
    driver_version: str
    app_version: str
    stopped_components: list[str]
    steps: list[PlannedStepOut] = Field(description="The steps its task will record, in order.")
    skipped: list[SkippedModeOut] = Field(description="The hook modes that will not run, and why.")

    @classmethod
    def of(cls, planned: preview.PlannedChange) -> PlannedChangeOut:
        target = planned.change.target
        return cls(
            type=planned.type,
            revision=planned.revision,
            driver_version=target.driver_version,
            app_version=target.app_version,
            stopped_components=target.stopped_components,
            steps=[
                PlannedStepOut(
                    name=step.name,
                    description=step.description,
                    hook=step.hook,
                    mode=step.mode,
                    actions=[PlannedActionOut(name=a.name, description=a.description) for a in step.actions],
                )
                for step in planned.plan.steps
            ],
            skipped=[SkippedModeOut(hook=s.hook, mode=s.mode, reason=s.reason) for s in planned.plan.skipped],
        )


class ObjectDiffOut(BaseModel):
    kind: str
    name: str
    namespace: str | None
    change: ObjectChange
    diff: str = Field(description="Unified diff of the object's YAML; secret values only as changed or not.")
    diff_truncated: bool


class ComponentImagesOut(BaseModel):
    component: str
    before: list[str] = Field(description="As get_component_images saw them in the last applied render.")
    after: list[str] = Field(description="As get_component_images will see them: component container first.")


class PreviewOut(BaseModel):
    deployment: str
    refusal: RefusalOut | None = Field(description="The refusal the request would meet; null if none.")
    nothing_to_do: bool = Field(description="True when the request would record no change.")
    changes: list[PlannedChangeOut]
    versions_from: VersionsOut | None
    versions_to: VersionsOut | None
    configuration_from: dict[str, Any] | None
    configuration_to: dict[str, Any] | None
    baseline_revision: int | None = Field(
        description="The revision the diff starts from: the last change that applied and succeeded."
    )
    objects: list[ObjectDiffOut]
    images: list[ComponentImagesOut]
    render_error: str | None
    notes: list[str]

    @classmethod
    def of(cls, shown: preview.Preview) -> PreviewOut:
        def versions(value: preview.Versions | None) -> VersionsOut | None:
            return (
                VersionsOut(driver_version=value.driver_version, app_version=value.app_version)
                if value
                else None
            )

        return cls(
            deployment=shown.deployment,
            refusal=RefusalOut(**vars(shown.refusal)) if shown.refusal else None,
            nothing_to_do=shown.nothing_to_do,
            changes=[PlannedChangeOut.of(planned) for planned in shown.changes],
            versions_from=versions(shown.versions_from),
            versions_to=versions(shown.versions_to),
            configuration_from=shown.configuration_from,
            configuration_to=shown.configuration_to,
            baseline_revision=shown.baseline_revision,
            objects=[ObjectDiffOut(**vars(diff)) for diff in shown.objects],
            images=[ComponentImagesOut(**vars(images)) for images in shown.images],
            render_error=shown.render_error,
            notes=shown.notes,
        )


class RevisionOut(BaseModel):
    revision: int
    type: TaskType
    driver: str
    driver_version: str
    app_version: str
    configuration: dict[str, Any] = Field(description=f'Secret values only as "{SECRET_SET}".')
    requested_by: str
    requested_at: datetime
    task_id: int | None
    task_status: TaskStatus | None
    task_error: str | None

    @classmethod
    def of(cls, entry: history.Revision) -> RevisionOut:
        return cls(
            revision=entry.revision,
            type=entry.type,
            driver=entry.driver_name,
            driver_version=entry.driver_version,
            app_version=entry.app_version,
            configuration=conceal_configuration(entry.configuration),
            requested_by=entry.requested_by,
            requested_at=entry.requested_at,
            task_id=entry.task_id,
            task_status=entry.task_status,
            task_error=entry.task_error,
        )


class BackupHintOut(BaseModel):
    backup_id: int
    revision: int
    app_version: str
    driver_version: str


class RollbackOut(BaseModel):
    to_revision: int
    changes: list[ChangeOut] = Field(description="The change recorded; empty when there was nothing to do.")
    backup: BackupHintOut | None = Field(
        description="A backup taken at that revision's versions: restore it if the driver refuses to go back."
    )


class ApplyOut(BaseModel):
    outcome: desired_state.Outcome
    changes: list[ChangeOut]


# --- routes ------------------------------------------------------------------------------------


def _record_for(
    db: Session, principal: Principal, name: str, body: Any
) -> Callable[[], Sequence[changes.Recorded]]:
    """The service call the real request of ``body`` makes, to run inside the preview's savepoint."""
    if isinstance(body, CreatePreview):
        create = body

        def record_create() -> list[changes.Recorded]:
            if create.name is not None and create.name != name:
                raise InvalidInput(
                    f'name: the body names "{create.name}" but the path "{name}"; give one name.',
                    field="name",
                )
            return [
                changes.create_deployment(
                    db,
                    by=principal,
                    name=name,
                    namespace=create.namespace,
                    driver_name=create.driver,
                    driver_version=create.driver_version,
                    app_version=create.app_version,
                    configuration=create.configuration.to_domain(),
                    cluster=create.cluster,
                )
            ]

        return record_create
    if isinstance(body, UpgradePreview):
        upgrade = body
        return lambda: [
            changes.upgrade_deployment(
                db, name, by=principal, app_version=upgrade.app_version, driver_version=upgrade.driver_version
            )
        ]
    if isinstance(body, ConfigurePreview):
        configuration = body.configuration.to_domain()
        return lambda: [changes.configure_deployment(db, name, by=principal, configuration=configuration)]
    if isinstance(body, RollbackPreview):
        revision = body.to_revision
        return lambda: desired_state.rollback_deployment(db, name, revision, by=principal).recorded
    assert isinstance(body, ApplyPreview)
    desired = body.to_desired(name)
    return lambda: desired_state.apply_deployment(db, desired, by=principal).recorded


def _rollback_notes(db: Session, name: str, body: Any) -> Callable[[], list[str]] | None:
    if not isinstance(body, RollbackPreview):
        return None
    revision = body.to_revision

    def notes() -> list[str]:
        deployment = changes.get_deployment(db, name)
        target = history.get_revision(db, name, revision)
        backup = history.backup_at_versions(db, deployment, target)
        return [backup_hint(name, revision, backup)] if backup is not None else []

    return notes


def backup_hint(name: str, revision: int, backup: history.BackupBefore) -> str:
    """What to do when a driver refuses to go back to a revision's versions."""
    return (
        f"If the driver refuses to go back to application {backup.app_version} (migrations that only go "
        f"forward), restore backup {backup.backup_id}, taken at revision {backup.revision} with those "
        f"versions: styrminctl deployments restore {name} --backup {backup.backup_id}"
    )


@router.post("/deployments/{name}/preview", response_model=PreviewOut)
def preview_change(name: DeploymentName, body: PreviewRequest, request: Request) -> PreviewOut:
    """What a change would do, without recording it or reaching the cluster: its steps, the rendered
    manifests' diff against the last succeeded change, the images, the versions and configuration from
    and to, and the refusal the request would meet. Read-only users may preview (the refusal says why
    they could not request it)."""
    # A transaction of its own, ended before Helm renders: the preview's writes are rolled back inside
    # it, and no lock or connection is held while the charts render.
    with short_transaction(request) as db:
        principal = authenticate_request(request, db)
        planned = preview.plan_preview(
            db,
            by=principal,
            name=name,
            record=_record_for(db, principal, name, body),
            needs=Role.READ_WRITE,
            notes=_rollback_notes(db, name, body),
        )
    return PreviewOut.of(preview.render_preview(planned))


@router.get("/deployments/{name}/revisions", response_model=list[RevisionOut])
def list_revisions(
    name: DeploymentName,
    db: Db,
    _: Reader,
    request: Request,
    response: Response,
    limit: Limit = 500,
    cursor: Cursor = None,
) -> list[RevisionOut]:
    """The deployment's revisions, newest first: each change's type, versions, configuration (secrets
    concealed), who requested it and when, and its task's status."""
    found = [RevisionOut.of(entry) for entry in history.deployment_history(db, name)]
    return page_of(
        found, lambda r: str(r.revision), limit=limit, cursor=cursor, request=request, response=response
    )


@router.get("/deployments/{name}/revisions/{revision}", response_model=RevisionOut)
def get_revision(
    name: DeploymentName, revision: Annotated[int, Field(ge=1, le=MAX_ID)], db: Db, _: Reader
) -> RevisionOut:
    """One revision of the deployment."""
    return RevisionOut.of(history.get_revision(db, name, revision))


@router.post("/deployments/{name}/rollback", response_model=RollbackOut, status_code=202)
def rollback_deployment(
    name: DeploymentName, body: RollbackRequest, db: Db, principal: Writer
) -> RollbackOut:
    """Request the change that brings back a revision's driver version, application version and
    configuration; an upgrade's hooks run when a version changes."""
    rolled = desired_state.rollback_deployment(db, name, body.to_revision, by=principal)
    return RollbackOut(
        to_revision=body.to_revision,
        changes=[change_out(db, recorded) for recorded in rolled.recorded],
        backup=BackupHintOut(**vars(rolled.backup)) if rolled.backup else None,
    )


@router.post("/deployments/{name}/apply", response_model=ApplyOut, status_code=202)
def apply_deployment(name: DeploymentName, body: DesiredIn, db: Db, principal: Writer) -> ApplyOut:
    """Make the deployment what the body says: create it, or request the change that gets it there, or
    nothing (outcome "unchanged")."""
    moved = desired_state.apply_deployment(db, body.to_desired(name), by=principal)
    return ApplyOut(outcome=moved.outcome, changes=[change_out(db, recorded) for recorded in moved.recorded])
