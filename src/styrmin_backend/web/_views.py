"""What the pages show, computed from the services' rows: task timelines, deployments, drivers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from styrmin_backend.clock import as_utc, utcnow
from styrmin_backend.domain.errors import NotFound
from styrmin_backend.domain.secrets import conceal
from styrmin_backend.domain.status import ComponentState, Status, component_state
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.drivers import DeploymentConfiguration, DriverSpec
from styrmin_backend.services import changes, deployment_status, drivers, tasks
from styrmin_backend.services.deployment_models import Deployment
from styrmin_backend.services.drivers import DriverVersion
from styrmin_backend.services.task_models import Step, Task
from styrmin_backend.services.tasks import StartedBy, TaskDetail
from styrmin_backend.web._rendered import Rendered, rendered_components

HISTORY_PAGE_SIZE = 20
"""Tasks per page of a deployment's history."""

_MIN_BAR_PERCENT = 0.6
"""A step that took no measurable time still gets a visible sliver on the timeline."""


@dataclass(frozen=True)
class StepView:
    """One step as the task view shows it, with its place on the task's timeline."""

    row: Step
    started_tasks: list[Task]
    seconds: float | None
    bar_offset: float
    bar_width: float
    flow_run_url: str | None


@dataclass(frozen=True)
class TaskView:
    """A task with its steps laid out on one timeline."""

    task: Task
    started_by: StartedBy | None
    steps: list[StepView]
    seconds: float | None
    retry_refusal: str | None = "Only a failed or cancelled task can be retried."
    """Why the task cannot be retried; None when it can (the page then offers "Retry…")."""

    @property
    def live(self) -> bool:
        """Whether the task can still change (the page then polls for its steps): until it ends, and
        while a cancelled task's agent has not yet stopped its work."""
        return not TaskStatus(self.task.status).ended or self.stopping

    @property
    def stopping(self) -> bool:
        """Cancelled while it ran, and its agent has not yet stopped the action or Helm operation it ran
        (``stopped_at``): the deployment's next Helm operation waits for that one."""
        task = self.task
        return task.status == TaskStatus.CANCELLED and task.started_at is not None and task.stopped_at is None

    @property
    def cancellable(self) -> bool:
        """Whether the task can be cancelled (pending or running; the page then offers "Cancel task…")."""
        return not TaskStatus(self.task.status).ended

    @property
    def result_extra(self) -> dict[str, Any]:
        """The task's result without the started tasks, which the steps already list."""
        return {k: v for k, v in (self.task.result or {}).items() if k != "started_tasks"}


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (as_utc(end) - as_utc(start)).total_seconds()


def task_view(detail: TaskDetail, prefect_ui_url: str, retry_refusal: str | None = None) -> TaskView:
    """The task view of ``detail``; flow runs link into the Prefect UI at ``prefect_ui_url``."""
    task, now = detail.task, utcnow()
    starts = [as_utc(s.started_at) for s in detail.steps if s.started_at]
    ends = [as_utc(s.ended_at) for s in detail.steps if s.ended_at]
    begin = as_utc(task.started_at) if task.started_at else min(starts, default=None)
    finish: datetime | None
    if task.ended_at:
        finish = as_utc(task.ended_at)
    elif task.status == "running" or any(s.status == "running" for s in detail.steps):
        finish = now
    else:
        finish = max(ends, default=begin)
    span = _seconds(begin, finish) or 0.0
    views = []
    for step in detail.steps:
        step_end = step.ended_at or (now if step.status == "running" else None)
        seconds = _seconds(step.started_at, step_end)
        offset = width = 0.0
        if begin is not None and step.started_at is not None and span > 0:
            offset = min(max((_seconds(begin, step.started_at) or 0.0) / span * 100, 0.0), 100.0)
            width = min(max((seconds or 0.0) / span * 100, _MIN_BAR_PERCENT), 100.0 - offset)
        elif step.started_at is not None:
            width = 100.0
        views.append(
            StepView(
                row=step,
                started_tasks=detail.started_tasks.get(step.id, []),
                seconds=seconds,
                bar_offset=round(offset, 2),
                bar_width=round(max(width, 0.0), 2),
                flow_run_url=f"{prefect_ui_url}/runs/flow-run/{step.flow_run_id}"
                if step.flow_run_id
                else None,
            )
        )
    task_end = task.ended_at or (now if task.status == "running" else None)
    return TaskView(task, detail.started_by, views, _seconds(task.started_at, task_end), retry_refusal)


def load_task_view(session: Session, task_id: int, prefect_ui_url: str) -> TaskView:
    """Task ``task_id`` as the task view shows it; raises NotFound."""
    detail = tasks.get_task_detail(session, task_id)
    refusal: str | None = "Only a failed or cancelled task can be retried."
    if TaskStatus(detail.task.status).unsuccessful:
        refusal = changes.retry_refused(session, detail.task)
    return task_view(detail, prefect_ui_url, refusal)


@dataclass
class DriverCache:
    """Driver specs read once per request (several deployments share a driver version)."""

    session: Session
    _specs: dict[tuple[str, str], DriverSpec | None] = field(default_factory=dict)

    def spec(self, name: str, version: str) -> DriverSpec | None:
        """The spec of ``name@version``, or None when it is not stored."""
        key = (name, version)
        if key not in self._specs:
            try:
                self._specs[key] = drivers.stored_spec(drivers.get_driver(self.session, name, version))
            except NotFound:
                self._specs[key] = None
        return self._specs[key]


@dataclass(frozen=True)
class DeploymentLine:
    """A row of the deployments list."""

    row: Deployment
    application: str
    last_task: Task | None
    status: Status


def deployment_lines(session: Session) -> list[DeploymentLine]:
    """Every deployment with its application's name, its status and its last task."""
    cache = DriverCache(session)
    lines = []
    rows = changes.list_deployments(session)
    statuses = deployment_status.statuses_of(session, rows)
    last = tasks.last_tasks(session, [row.id for row in rows])
    for row in rows:
        spec = cache.spec(row.driver_name, row.driver_version)
        lines.append(
            DeploymentLine(
                row=row,
                application=spec.spec.application.name if spec else row.driver_name,
                last_task=last.get(row.id),
                status=statuses[row.id],
            )
        )
    return lines


@dataclass(frozen=True)
class ComponentView:
    """A component of a deployment: its workload, whether it should run, and its configuration."""

    name: str
    workload_kind: str
    workload_name: str
    container: str | None
    stopped: bool
    image_override: str | None
    env: dict[str, str]
    replicas: int | None
    images: list[str]
    ready_replicas: int | None = None
    """Ready replicas of the workload as the agent last saw it; None before it reported."""
    live_replicas: int | None = None
    live_images: list[str] | None = None
    """The images the agent last saw the workload run (component container first)."""

    @property
    def state(self) -> ComponentState:
        """The component's state by the domain's rule."""
        return component_state(self.stopped, self.live_replicas, self.ready_replicas)


def component_views(
    row: Deployment, spec: DriverSpec | None, rendered: Rendered | None
) -> list[ComponentView]:
    """The components of a deployment: overrides, env vars (secret ones shown only as set), replicas, images."""
    if spec is None:
        return []
    shown = rendered.components if rendered else {}
    configuration = DeploymentConfiguration.model_validate(row.configuration)
    stopped = set(row.stopped_components)
    live = {str(s.get("name")): s for s in row.components_status or [] if isinstance(s, dict)}
    return [
        ComponentView(
            name=c.name,
            workload_kind=c.workload.kind,
            workload_name=c.workload.resolved_name(row.name),
            container=c.container,
            stopped=c.name in stopped,
            image_override=configuration.images.get(c.name),
            env={k: conceal(v, k) for k, v in configuration.env.get(c.name, {}).items()},
            replicas=shown[c.name].replicas if c.name in shown else None,
            images=shown[c.name].images if c.name in shown else [],
            ready_replicas=int(live[c.name]["ready_replicas"]) if c.name in live else None,
            live_replicas=int(live[c.name]["replicas"]) if c.name in live else None,
            live_images=[str(i) for i in live[c.name].get("images") or []] if c.name in live else None,
        )
        for c in spec.spec.components
    ]


def masked_values(row: Deployment) -> dict[str, Any]:
    """The deployment's Helm values with secret values shown only as set."""
    values: dict[str, Any] = conceal(DeploymentConfiguration.model_validate(row.configuration).values)
    return values


def driver_versions(session: Session, name: str) -> list[str]:
    """The stored versions of driver ``name``, in push order."""
    return [row.version for row in drivers.list_drivers(session, name)]


@dataclass(frozen=True)
class DriverView:
    """A stored driver version as the drivers page shows it."""

    row: DriverVersion
    spec: DriverSpec


def driver_views(session: Session) -> list[DriverView]:
    """Every stored driver version, newest push of each driver first."""
    rows = drivers.list_drivers(session)
    rows.sort(key=lambda r: (r.name, -r.id))
    return [DriverView(row, drivers.stored_spec(row)) for row in rows]


def rendered_for(session: Session, row: Deployment) -> Rendered | None:
    """The deployment's components as its driver's chart renders them; None when the driver is gone."""
    try:
        driver = drivers.get_driver(session, row.driver_name, row.driver_version)
    except NotFound:
        return None
    return rendered_components(driver, row.name, row.namespace, row.app_version, row.configuration)
