"""Changes to deployments: each records the next revision and a pending task for the agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.deployments import (
    check_app_version,
    check_cluster_name,
    check_deployment_name,
    check_namespace,
    next_revision,
)
from styrmin_backend.domain.errors import Conflict, InvalidInput, NotFound, Refused
from styrmin_backend.domain.secrets import keep_concealed_configuration
from styrmin_backend.domain.status import (
    DeploymentStatus,
    LatestChange,
    UpgradeDecision,
    Versions,
    decide_upgrade,
    retry_refusal,
)
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.protocol import CHANGE_ADAPTER, Change, Target
from styrmin_backend.services import deployment_status
from styrmin_backend.services.change_models import (
    RequestedChange,
    RequestedConfigure,
    RequestedCreate,
    RequestedDelete,
    RequestedRestore,
    RequestedStart,
    RequestedStop,
    RequestedUpgrade,
    requested_of,
)
from styrmin_backend.services.deployment_models import Deployment
from styrmin_backend.services.drivers import DriverInfo, get_driver_info
from styrmin_backend.services.principal import Principal
from styrmin_backend.services.task_models import Task
from styrmin_backend.store.models import BackupRow, ChangeRow, DeploymentRow, StepRow, TaskRow


@dataclass(frozen=True)
class Origin:
    """The hook step of a running task whose action requested this change (links the new task)."""

    task_id: int
    step_id: int


@dataclass(frozen=True)
class Recorded:
    """A recorded change and its pending task; ``task`` is None when there was nothing to change."""

    deployment: Deployment
    task: Task | None

    @classmethod
    def of(cls, deployment: DeploymentRow, task: TaskRow | None) -> Recorded:
        """The change recorded on ``deployment``, read once the change is recorded."""
        return cls(
            Deployment.model_validate(deployment), Task.model_validate(task) if task is not None else None
        )


_DEPLOYMENT_BY_NAME = select(DeploymentRow).where(DeploymentRow.name == bindparam("name"))
"""Built once: every change's request reads its deployment."""


def get_deployment(session: Session, name: str) -> DeploymentRow:
    """The deployment called ``name``; raises NotFound."""
    row = session.scalars(_DEPLOYMENT_BY_NAME, {"name": name}).one_or_none()
    if row is None or row.status == DeploymentStatus.DELETED:
        raise NotFound(f'There is no deployment "{name}".', field="name")
    return row


def read_deployment(session: Session, name: str) -> Deployment:
    """The deployment called ``name`` as the interfaces show it; raises NotFound."""
    return Deployment.model_validate(get_deployment(session, name))


def list_deployments(session: Session) -> list[Deployment]:
    """Every deployment that is not deleted, by name."""
    return Deployment.read_all(
        session,
        select(*DeploymentRow.__table__.columns)
        .where(DeploymentRow.status != DeploymentStatus.DELETED.value)
        .order_by(DeploymentRow.name),
    )


def create_deployment(
    session: Session,
    *,
    by: Principal,
    name: str,
    namespace: str,
    driver_name: str,
    driver_version: str,
    app_version: str | None,
    configuration: DeploymentConfiguration,
    cluster: str = "local",
) -> Recorded:
    """Record a deployment and its create change; the agent installs it."""
    check_deployment_name(name)
    check_namespace(namespace)
    check_cluster_name(cluster)
    if app_version is not None:
        check_app_version(app_version)
    driver = get_driver_info(session, driver_name, driver_version)
    _check_configuration(driver, configuration)
    existing = session.scalars(select(DeploymentRow).where(DeploymentRow.name == name)).one_or_none()
    if existing is not None and existing.status != DeploymentStatus.DELETED:
        raise Conflict(f'A deployment "{name}" already exists; choose another name.', field="name")
    if existing is not None:
        session.delete(existing)
        session.flush()
    now = utcnow()
    deployment = DeploymentRow(
        name=name,
        namespace=namespace,
        cluster=cluster,
        driver_name=driver.name,
        driver_version=driver.version,
        app_version=app_version or driver.default_app_version,
        configuration=configuration.model_dump(mode="json"),
        stopped_components=[],
        status=DeploymentStatus.DEPLOYING.value,
        last_revision=0,
        created_at=now,
        updated_at=now,
    )
    session.add(deployment)
    try:
        session.flush()
    except IntegrityError as error:
        raise Conflict(f'A deployment "{name}" already exists; choose another name.', field="name") from error
    requested = RequestedCreate(
        driver_version=deployment.driver_version,
        app_version=deployment.app_version,
        configuration=deployment.configuration,
    )
    return Recorded.of(deployment, _record_change(session, deployment, requested, by, None))


def upgrade_deployment(
    session: Session,
    name: str,
    *,
    by: Principal,
    app_version: str | None,
    driver_version: str | None,
    origin: Origin | None = None,
) -> Recorded:
    """Record an upgrade of the application and/or driver version; no task when both already match."""
    if app_version is None and driver_version is None:
        raise InvalidInput(
            "Say what to upgrade: give app_version, driver_version or both.", field="app_version"
        )
    if app_version is not None:
        check_app_version(app_version)
    deployment = _get_changeable(session, name)
    target_driver = driver_version or deployment.driver_version
    target_app = app_version or deployment.app_version
    if origin is not None:
        unfinished = unfinished_started_task(session, origin, TaskType.UPGRADE)
        if unfinished is not None and unfinished.change_id is not None:
            change = session.get(ChangeRow, unfinished.change_id)
            asked = requested_of(change) if change is not None else None
            if isinstance(asked, RequestedUpgrade) and (asked.app_version, asked.driver_version) == (
                target_app,
                target_driver,
            ):
                return Recorded.of(deployment, unfinished)
    if origin is None:
        facts = deployment_status.facts_of(session, deployment)
        decision = decide_upgrade(Versions(target_app, target_driver), facts)
        if decision is UpgradeDecision.NOTHING_TO_DO:
            return Recorded.of(deployment, None)
        if decision is UpgradeDecision.WAIT:
            busy = deployment_status.status_of(session, deployment)
            raise Conflict(
                f'Deployment "{name}" is already being changed to application {target_app} with driver '
                f"version {target_driver}: {busy.reason} Wait for it to end; if it fails, request the "
                "upgrade again or retry its task.",
                field="app_version",
            )
    # An action's upgrade (upgrade_deployment_version) compares with what the cluster runs, since its
    # own change already asked for the target. A restore's upgrade also brings the backup's
    # configuration back, so it has work to do when only the configuration differs.
    snapshot = _restored_configuration(session, origin)
    configuration = deployment.configuration if snapshot is None else snapshot
    running = (deployment.running_app_version or "", deployment.running_driver_version or "")
    if (
        origin is not None
        and (target_app, target_driver) == running
        and configuration == deployment.configuration
    ):
        return Recorded.of(deployment, None)
    driver = get_driver_info(session, deployment.driver_name, target_driver)
    _check_configuration(driver, DeploymentConfiguration.model_validate(configuration))
    deployment.configuration = configuration
    requested = RequestedUpgrade(
        # From what the cluster runs: after a failed upgrade, requesting it again starts from there.
        from_app_version=deployment.running_app_version or deployment.app_version,
        app_version=target_app,
        from_driver_version=deployment.running_driver_version or deployment.driver_version,
        driver_version=target_driver,
        configuration=deployment.configuration,
        # An upgrade an action asked for applies the target through Helm, without running hooks again.
        run_hooks=origin is None,
    )
    deployment.app_version = target_app
    deployment.driver_version = target_driver
    return Recorded.of(deployment, _record_change(session, deployment, requested, by, origin))


def configure_deployment(
    session: Session, name: str, *, by: Principal, configuration: DeploymentConfiguration
) -> Recorded:
    """Record a new configuration (values, image overrides, env vars), applied without hooks."""
    deployment = _get_changeable(session, name)
    driver = get_driver_info(session, deployment.driver_name, deployment.driver_version)
    _check_configuration(driver, configuration)
    # A configuration read through the API shows secrets only as set; sent back so, they stay as stored.
    deployment.configuration = keep_concealed_configuration(
        configuration.model_dump(mode="json"), deployment.configuration
    )
    requested = RequestedConfigure(configuration=deployment.configuration)
    return Recorded.of(deployment, _record_change(session, deployment, requested, by, None))


def set_components_running(
    session: Session,
    name: str,
    *,
    by: Principal,
    components: list[str],
    running: bool,
    origin: Origin | None = None,
) -> Recorded:
    """Record a stop (``running=False``) or start of ``components``."""
    deployment = _get_changeable(session, name)
    driver = get_driver_info(session, deployment.driver_name, deployment.driver_version)
    if not components:
        raise InvalidInput("Name at least one component.", field="components")
    unknown = [c for c in components if c not in driver.components]
    if unknown:
        raise InvalidInput(
            f'Deployment "{name}" has no component {", ".join(repr(c) for c in unknown)}; '
            f"its components are {', '.join(driver.components)}.",
            field="components",
        )
    stopped = set(deployment.stopped_components)
    stopped = stopped - set(components) if running else stopped | set(components)
    deployment.stopped_components = sorted(stopped)
    named = list(dict.fromkeys(components))
    requested = RequestedStart(components=named) if running else RequestedStop(components=named)
    return Recorded.of(deployment, _record_change(session, deployment, requested, by, origin))


def delete_deployment(session: Session, name: str, *, by: Principal) -> Recorded:
    """Record the removal of a deployment: the agent uninstalls it."""
    deployment = _get_changeable(session, name)
    return Recorded.of(deployment, _record_change(session, deployment, RequestedDelete(), by, None))


def retry_task(session: Session, task_id: int, *, by: Principal) -> Recorded:
    """Request the change of failed task ``task_id`` again: a new revision and a new task.

    Only the latest task of its type for its deployment can be retried, and only once it failed; a
    task an action started is part of its parent, which is the one to retry. Raises Conflict otherwise.
    """
    task = session.get(TaskRow, task_id)
    if task is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    refusal = retry_refused(session, task)
    if refusal is not None:
        raise Conflict(refusal, field="task_id")
    deployment = get_deployment(session, task.deployment_name)
    task_type = TaskType(task.type)
    change = session.get(ChangeRow, task.change_id) if task.change_id else None
    requested = requested_of(change) if change is not None else None
    name = deployment.name
    if task_type is TaskType.UPGRADE:
        upgrade = requested if isinstance(requested, RequestedUpgrade) else None
        return upgrade_deployment(
            session,
            name,
            by=by,
            app_version=upgrade.app_version if upgrade else deployment.app_version,
            driver_version=upgrade.driver_version if upgrade else deployment.driver_version,
        )
    if task_type is TaskType.CONFIGURE:
        configuration = DeploymentConfiguration.model_validate(deployment.configuration)
        return configure_deployment(session, name, by=by, configuration=configuration)
    if task_type in (TaskType.STOP, TaskType.START):
        components = (
            list(requested.components) if isinstance(requested, RequestedStop | RequestedStart) else []
        )
        running = task_type is TaskType.START
        return set_components_running(session, name, by=by, components=components, running=running)
    if task_type is TaskType.DELETE:
        return delete_deployment(session, name, by=by)
    if task_type is TaskType.CREATE:
        _get_changeable(session, name)
        create = RequestedCreate(
            driver_version=deployment.driver_version,
            app_version=deployment.app_version,
            configuration=deployment.configuration,
        )
        return Recorded.of(deployment, _record_change(session, deployment, create, by, None))
    raise Conflict(f"A {task_type.value} task cannot be retried yet; request it again.", field="task_id")


class RetriedTask(Protocol):
    """What deciding a retry reads of a task (its row or its read model)."""

    @property
    def id(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def deployment_id(self) -> int | None: ...
    @property
    def parent_task_id(self) -> int | None: ...


def retry_refused(session: Session, task: RetriedTask) -> str | None:
    """Why ``task`` cannot be retried, or None when it can (see ``retry_task``)."""
    if task.parent_task_id is not None:
        return (
            f"Task {task.id} was started by an action of task {task.parent_task_id}; "
            f"retry task {task.parent_task_id} instead."
        )
    deployment = session.get(DeploymentRow, task.deployment_id) if task.deployment_id else None
    if deployment is None or deployment.status == DeploymentStatus.DELETED:
        return f"The deployment of task {task.id} no longer exists."
    task_type = TaskType(task.type)
    latest = deployment_status.latest_changes(session, [deployment.id])[deployment.id].get(task_type)
    return retry_refusal(LatestChange(task.id, task_type, TaskStatus(task.status)), latest)


def origin_of(session: Session, by: Principal, step_id: int | None) -> Origin | None:
    """The origin of a change that an action asked for from hook step ``step_id``; only actions may."""
    if step_id is None:
        return None
    if not by.is_builtin:
        raise Refused(
            "Only Styrmin's actions can link a change to a hook step; leave started_by_step out.",
            field="started_by_step",
        )
    step = session.get(StepRow, step_id)
    if step is None:
        raise InvalidInput(f"There is no step {step_id}.", field="started_by_step")
    if step.task_id != by.actions_task_id:
        raise Refused(
            f"Step {step_id} belongs to task {step.task_id}; actions link changes only to the steps of "
            "their own task.",
            field="started_by_step",
        )
    return Origin(task_id=step.task_id, step_id=step.id)


def unfinished_started_task(session: Session, origin: Origin, task_type: TaskType) -> TaskRow | None:
    """The newest task of ``task_type`` that hook step ``origin`` started and that has not ended.

    An action that asks for the same change again from the same step (a Prefect retry of a flow run
    that stopped half done) gets this task back, to wait for, rather than a second one.
    """
    return session.scalars(
        select(TaskRow)
        .where(
            TaskRow.parent_step_id == origin.step_id,
            TaskRow.type == task_type.value,
            TaskRow.status.in_([TaskStatus.PENDING.value, TaskStatus.RUNNING.value]),
        )
        .order_by(TaskRow.id.desc())
        .limit(1)
    ).first()


def claimed_change(requested: RequestedChange, deployment: Deployment) -> Change:
    """The change a claimed task carries out, with the target it moves the deployment to.

    Resolved once, here, when the agent claims the task: a create or upgrade moves to the versions it
    asked for; a restore to the backup's; every other change keeps what the cluster runs.
    """
    configuration = requested.configuration or deployment.configuration
    stopped = list(deployment.stopped_components)
    running_app = deployment.running_app_version or deployment.app_version
    running_driver = deployment.running_driver_version or deployment.driver_version
    if isinstance(requested, RequestedCreate):
        target = Target(
            driver_version=requested.driver_version,
            app_version=requested.app_version,
            current_app_version=None,
            configuration=configuration,
            stopped_components=[],
        )
    elif isinstance(requested, RequestedUpgrade):
        target = Target(
            driver_version=requested.driver_version,
            app_version=requested.app_version,
            current_app_version=requested.from_app_version,
            configuration=configuration,
            stopped_components=stopped,
        )
    elif isinstance(requested, RequestedRestore):
        target = Target(
            driver_version=requested.driver_version,
            app_version=requested.app_version,
            current_app_version=requested.app_version,
            configuration=configuration,
            stopped_components=stopped,
        )
    else:
        target = Target(
            driver_version=running_driver,
            app_version=running_app,
            current_app_version=running_app,
            configuration=configuration,
            stopped_components=stopped,
        )
    # The claim's change is the requested one with its target: the same fields, by the same names.
    fields = requested.model_dump(
        exclude={"configuration", "app_version", "driver_version"}, exclude_none=True
    )
    return CHANGE_ADAPTER.validate_python({**fields, "target": target})


def _restored_configuration(session: Session, origin: Origin | None) -> dict[str, Any] | None:
    """The configuration snapshot of the backup that a restore task brings back, when ``origin`` is one."""
    if origin is None:
        return None
    task = session.get(TaskRow, origin.task_id)
    if task is None or task.type != TaskType.RESTORE.value or task.change_id is None:
        return None
    change = session.get(ChangeRow, task.change_id)
    restore = requested_of(change) if change is not None else None
    if not isinstance(restore, RequestedRestore):
        return None
    backup = session.get(BackupRow, restore.backup_id)
    return dict(backup.configuration) if backup is not None else None


def _get_changeable(session: Session, name: str) -> DeploymentRow:
    deployment = get_deployment(session, name)
    if deployment.status == DeploymentStatus.DELETING:
        raise Conflict(f'Deployment "{name}" is being deleted; it accepts no more changes.', field="name")
    return deployment


def _check_configuration(driver: DriverInfo, configuration: DeploymentConfiguration) -> None:
    for field, keys in (("images", configuration.images), ("env", configuration.env)):
        unknown = [key for key in keys if key not in driver.components]
        if unknown:
            raise InvalidInput(
                f"configuration.{field}: driver {driver.name}@{driver.version} has no component "
                f"{', '.join(repr(k) for k in unknown)}; its components are {', '.join(driver.components)}.",
                field=f"configuration.{field}",
            )


_NEXT_REVISION = (
    update(DeploymentRow)
    .where(DeploymentRow.id == bindparam("deployment"))
    .values(last_revision=next_revision(DeploymentRow.last_revision), updated_at=bindparam("now"))
    .returning(DeploymentRow.last_revision)
    .execution_options(synchronize_session=False)
)


def _record_change(
    session: Session,
    deployment: DeploymentRow,
    requested: RequestedChange,
    by: Principal,
    origin: Origin | None,
) -> TaskRow:
    # One UPDATE ... RETURNING makes the revision atomic on both engines, with no read-modify-write race.
    now = utcnow()
    revision = session.execute(_NEXT_REVISION, {"deployment": deployment.id, "now": now}).scalar_one()
    # What the UPDATE wrote, as the loaded row's own: the row is up to date, with nothing to write again.
    set_committed_value(deployment, "last_revision", revision)
    set_committed_value(deployment, "updated_at", now)
    task_type = requested.type
    change = ChangeRow(
        deployment_id=deployment.id,
        revision=revision,
        type=task_type.value,
        spec=requested.stored(),
        requested_by=by.username,
        created_at=now,
    )
    session.add(change)
    session.flush()
    task = TaskRow(
        type=task_type.value,
        status=TaskStatus.PENDING.value,
        deployment_id=deployment.id,
        deployment_name=deployment.name,
        change_id=change.id,
        revision=revision,
        requested_by=by.username,
        created_at=now,
        parent_task_id=origin.task_id if origin else None,
        parent_step_id=origin.step_id if origin else None,
        cluster=deployment.cluster,
    )
    session.add(task)
    session.flush()
    if origin is None:
        deployment_status.refresh_status(session, deployment)
    return task
