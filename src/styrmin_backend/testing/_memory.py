"""An in-memory deployment for the primitives: what a driver author's test gives and asserts on.

:class:`State` is a deployment as the primitives see it (versions, configuration, components and
their containers, Jobs earlier actions left, how each command ends). :class:`MemoryBackend` plays the
Styrmin API and the cluster on it, recording every effect in order. The primitives' own rules
(linking, images, env, Jobs, the output's tail, errors) run unchanged on top of it: only the
outside world is simulated.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import styrmin
from styrmin_backend.actions._backend import ActionJob, ApiFailed, ApiRefused, JobPod
from styrmin_backend.actions._tail import OutputTail
from styrmin_backend.actions.commands import (
    ACTION_JOB_LABEL,
    DEPLOYMENT_LABEL,
    JOB_CONTAINER,
    OUTPUT_READ_ANNOTATION,
    TASK_LABEL,
)
from styrmin_backend.domain.backups import check_can_back_up
from styrmin_backend.domain.errors import Conflict
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.drivers import DeploymentConfiguration, DriverSpec, render_image

# --- the state a test gives ------------------------------------------------------------------------


@dataclass(frozen=True)
class Container:
    """A container of a component's pod template; ``image`` may hold ``{{ app.version }}``.

    The image is rendered with the version the deployment runs, as a chart renders it, so one state
    serves before and after ``upgrade_deployment_version``.
    """

    name: str
    image: str
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Component:
    """A component's workload: its containers in pod order, and whether it runs (or is stopped)."""

    name: str
    containers: Sequence[Container]
    init_containers: Sequence[Container] = ()
    running: bool = True


@dataclass(frozen=True)
class Job:
    """A Job an earlier action of the deployment left (or that still runs), as ``execute_commands`` made it."""

    name: str
    task_id: int = 1
    running: bool = False
    succeeded: bool = True
    output_read: bool = True
    command: tuple[str, ...] = ()
    image: str = ""


@dataclass(frozen=True)
class CommandOutcome:
    """How a command of ``execute_commands`` ends: its exit code and output.

    ``exit_code=None`` with ``reason`` is a command that never ran (``"ErrImagePull: ..."``);
    ``timed_out`` is one Kubernetes stopped at its timeout.
    """

    exit_code: int | None = 0
    output: str | bytes = ""
    reason: str | None = None
    timed_out: bool = False


_STARTED_TASK_TYPES = tuple(
    t.value
    for t in (
        styrmin.TaskType.STOP,
        styrmin.TaskType.START,
        styrmin.TaskType.UPGRADE,
        styrmin.TaskType.BACKUP,
    )
)
"""The types of the tasks the primitives start: the keys ``State.failing_tasks`` takes."""


@dataclass(frozen=True)
class State:
    """A deployment as the primitives see it, before (given by the test) or after (returned) an action.

    ``configuration`` is the configuration its workloads have; the change's new one is passed to
    :meth:`Context.run`. ``commands`` says how a command ends, keyed by the command as a shell line:
    a list by its words joined as a shell would read them (``"shop migrate"``), a string command by the
    string itself; other commands succeed without output. ``failing_tasks`` makes the task of a type
    (``"stop"``, ``"start"``, ``"upgrade"``, ``"backup"``) fail with that error; another key is refused. ``actions_user`` is what an administrator did to
    ``styrmin-actions``.
    """

    app_version: str
    driver_version: str | None = None
    configuration: Mapping[str, Any] | DeploymentConfiguration = field(default_factory=dict)
    components: Sequence[Component] = ()
    jobs: Sequence[Job] = ()
    commands: Mapping[str, CommandOutcome] = field(default_factory=dict)
    failing_tasks: Mapping[str, str] = field(default_factory=dict)
    actions_user: Literal["read-write", "read-only", "deactivated"] = "read-write"

    def __post_init__(self) -> None:
        unknown = [key for key in self.failing_tasks if key not in _STARTED_TASK_TYPES]
        if unknown:
            raise ValueError(
                f"State(failing_tasks=...): {', '.join(repr(key) for key in unknown)} is not a type of task "
                f"an action starts; use one of {', '.join(repr(t) for t in _STARTED_TASK_TYPES)}, "
                'e.g. failing_tasks={"upgrade": "Helm upgrade failed: ..."}.'
            )

    def component(self, name: str) -> Component:
        """The component ``name``; raises KeyError."""
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)

    @property
    def deployment_configuration(self) -> DeploymentConfiguration:
        """``configuration`` as Styrmin validates it."""
        if isinstance(self.configuration, DeploymentConfiguration):
            return self.configuration
        return DeploymentConfiguration.model_validate(dict(self.configuration))


# --- the effects a test asserts on, in order --------------------------------------------------------


@dataclass(frozen=True)
class ComponentsStopped:
    """``stop_components`` started a stop task, linked to the hook step."""

    components: tuple[str, ...]


@dataclass(frozen=True)
class ComponentsStarted:
    """``start_components`` started a start task, linked to the hook step."""

    components: tuple[str, ...]


@dataclass(frozen=True)
class DeploymentUpgraded:
    """``upgrade_deployment_version`` started an upgrade task, linked to the hook step."""

    app_version: str
    driver_version: str


@dataclass(frozen=True)
class BackupTaken:
    """``create_backup`` started a backup task, linked to the hook step."""

    deployment: str


@dataclass(frozen=True)
class JobStarted:
    """``execute_commands`` created a Job; ``name`` (random suffix) and ``env`` are not compared."""

    command: tuple[str, ...]
    image: str
    name: str = field(default="", compare=False)
    env: Mapping[str, str] = field(default_factory=dict, compare=False)
    env_from: Sequence[Mapping[str, Any]] = field(default_factory=tuple, compare=False)


@dataclass(frozen=True)
class JobDeleted:
    """A Job was deleted: one an earlier action left, or one past its timeout."""

    name: str


@dataclass(frozen=True)
class NoteAdded:
    """A line was added to the hook step's notes."""

    note: str


@dataclass(frozen=True)
class OutputStored:
    """The end of a failed command's output was stored on the hook step."""

    tail: str
    truncated: bool


Effect = (
    ComponentsStopped
    | ComponentsStarted
    | DeploymentUpgraded
    | BackupTaken
    | JobStarted
    | JobDeleted
    | NoteAdded
    | OutputStored
)


# --- the backend --------------------------------------------------------------------------------------

ACTIONS_TOKEN = "sta_memory-backend-token-of-styrmin-actions"  # noqa: S105 (a test value)
"""The token the in-memory API says the action carries: a command printing it has it redacted."""


@dataclass
class _StartedTask:
    id: int
    type: styrmin.TaskType
    status: styrmin.TaskStatus
    error: str | None


def _now() -> datetime:
    return datetime.now(UTC)


class MemoryApi:
    """The Styrmin API of one deployment and one hook step, in memory."""

    def __init__(self, world: MemoryBackend) -> None:
        self._world = world

    @property
    def token(self) -> str | None:
        return ACTIONS_TOKEN

    def _may_read(self) -> None:
        """A deactivated styrmin-actions has every call refused (401)."""
        if self._world.state.actions_user == "deactivated":
            raise ApiRefused(f'The user "{ACTIONS_USERNAME}" is deactivated, so its tokens are refused.')

    def _may_write(self) -> None:
        """A Read-only styrmin-actions may read but not change anything (403)."""
        self._may_read()
        if self._world.state.actions_user == "read-only":
            raise ApiRefused(f'User "{ACTIONS_USERNAME}" has the role Read-only; this needs Read/write.')

    async def driver_spec(self, driver_name: str, driver_version: str) -> DriverSpec:
        self._may_read()
        spec = self._world.spec
        if (driver_name, driver_version) != (spec.metadata.name, self._world.driver_version):
            raise ApiFailed(f"Driver {driver_name}@{driver_version} is not in the registry.")
        return spec

    async def request_components(
        self, deployment: str, components: list[str], *, running: bool, started_by_step: int
    ) -> int | None:
        self._may_write()
        world = self._world
        declared = {c.name for c in world.spec.spec.components}
        unknown = [c for c in components if c not in declared]
        if unknown:
            raise ApiFailed(f"Deployment {deployment} has no component {', '.join(unknown)}.")
        task_type = styrmin.TaskType.START if running else styrmin.TaskType.STOP
        world.effects.append((ComponentsStarted if running else ComponentsStopped)(tuple(components)))
        task = world.start_task(task_type, started_by_step)
        if task.status == styrmin.TaskStatus.SUCCEEDED:
            world.state = replace(
                world.state,
                components=[
                    replace(c, running=running) if c.name in components else c for c in world.state.components
                ],
            )
        return task.id

    async def request_upgrade(
        self, deployment: str, *, app_version: str, driver_version: str, started_by_step: int
    ) -> int | None:
        self._may_write()
        world = self._world
        state = world.state
        if (state.app_version, state.driver_version or world.spec.metadata.version) == (
            app_version,
            driver_version,
        ):
            return None  # the deployment already runs it: the server starts no task
        world.effects.append(DeploymentUpgraded(app_version, driver_version))
        task = world.start_task(styrmin.TaskType.UPGRADE, started_by_step)
        if task.status == styrmin.TaskStatus.SUCCEEDED:
            # The chart now runs the target with the change's configuration.
            world.state = replace(
                state,
                app_version=app_version,
                driver_version=driver_version,
                configuration=world.configuration,
            )
        return task.id

    async def request_backup(self, deployment: str, *, started_by_step: int) -> int:
        self._may_write()
        spec = self._world.spec
        try:
            check_can_back_up(
                deployment,
                f"{spec.metadata.name}@{spec.metadata.version}",
                (action.hook for action in spec.spec.actions),
            )
        except Conflict as refused:  # as the SDK reads the server's answer
            raise ApiFailed(f"{refused.message} (HTTP {refused.http_status})") from None
        self._world.effects.append(BackupTaken(deployment))
        return self._world.start_task(styrmin.TaskType.BACKUP, started_by_step).id

    async def configured_env(self, task_id: int, component: str) -> dict[str, str]:
        self._may_read()
        return dict(self._world.configuration.env.get(component, {}))

    async def wait_for_task(self, task_id: int) -> styrmin.Task:
        self._may_read()
        return self._world.task(task_id)

    async def add_step_note(self, step_id: int, note: str) -> None:
        self._may_write()
        self._world.effects.append(NoteAdded(note))

    async def store_step_output(self, step_id: int, tail: str, truncated: bool) -> None:
        self._may_write()
        self._world.effects.append(OutputStored(tail, truncated))


class MemoryCluster:
    """The deployment's namespace, in memory: its workloads' pod templates and the actions' Jobs."""

    def __init__(self, world: MemoryBackend) -> None:
        self._world = world

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        return None  # the in-memory workloads take their env vars as values, from no Secret

    async def pod_template(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        world = self._world
        for declared in world.spec.spec.components:
            if declared.workload.kind != kind or declared.workload.resolved_name(world.deployment) != name:
                continue
            try:
                component = world.state.component(declared.name)
            except KeyError:
                return None
            return world.pod_template(component)
        return None

    async def list_action_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[ActionJob]:
        wanted = {DEPLOYMENT_LABEL: self._world.deployment, ACTION_JOB_LABEL: "true"}
        if dict(labels) != wanted:
            return []
        return [self._world.action_job(job) for job in self._world.state.jobs]

    async def create_job(self, manifest: dict[str, Any]) -> str | None:
        world = self._world
        name = manifest["metadata"]["name"]
        if any(job.name == name for job in world.state.jobs):
            return None
        container = manifest["spec"]["template"]["spec"]["containers"][0]
        assert container["name"] == JOB_CONTAINER
        command = tuple(container["command"])
        env = {var["name"]: var.get("value", "<from a reference>") for var in container.get("env", [])}
        world.effects.append(
            JobStarted(command, container["image"], name, env, tuple(container.get("envFrom", [])))
        )
        task = int(manifest["metadata"]["labels"][TASK_LABEL])
        job = Job(
            name, task_id=task, running=True, output_read=False, command=command, image=container["image"]
        )
        world.state = replace(world.state, jobs=[*world.state.jobs, job])
        return "1"

    async def delete_job(self, namespace: str, name: str) -> bool:
        world = self._world
        if not any(job.name == name for job in world.state.jobs):
            return False
        world.effects.append(JobDeleted(name))
        world.state = replace(world.state, jobs=[job for job in world.state.jobs if job.name != name])
        return True

    async def wait_for_job_end(self, namespace: str, name: str, resource_version: str | None) -> ActionJob:
        world = self._world
        job = world.job(name)
        if job.running and job.command:  # one this action started: it ends as the state says
            outcome = world.outcome(job.command)
            job = replace(job, running=False, succeeded=outcome.exit_code == 0 and not outcome.timed_out)
            world.replace_job(job)
        if job.running:
            raise AssertionError(
                f"Job {name} still runs in the test's state; the action would wait for it forever."
            )
        return world.action_job(job)

    async def job_pod(self, namespace: str, job_name: str) -> JobPod:
        job = self._world.job(job_name)
        outcome = self._world.outcome(job.command)
        if outcome.exit_code is None:
            return JobPod(f"{job_name}-pod", None, outcome.reason)
        return JobPod(f"{job_name}-pod", outcome.exit_code)

    async def read_job_log(self, namespace: str, pod: str, tail: OutputTail) -> None:
        job = self._world.job(pod.removesuffix("-pod"))
        output = self._world.outcome(job.command).output
        tail.feed(output.encode() if isinstance(output, str) else output)

    async def mark_job_output_read(self, namespace: str, name: str) -> None:
        self._world.replace_job(replace(self._world.job(name), output_read=True))


class MemoryBackend:
    """The Styrmin API and the cluster of one deployment during one action, in memory.

    ``effects`` lists what the primitives did, in order; ``state`` is the deployment as it is now;
    ``log`` what they logged.
    """

    def __init__(
        self,
        spec: DriverSpec,
        state: State,
        *,
        deployment: str,
        driver_version: str,
        configuration: DeploymentConfiguration,
        task_type: styrmin.TaskType,
        task_id: int,
        hook_step_id: int,
        hook_step_name: str,
    ) -> None:
        self.spec = spec
        self.state = state
        self.deployment = deployment
        self.driver_version = driver_version
        self.configuration = configuration
        self.effects: list[Effect] = []
        self.messages: list[str] = []
        self.started: list[_StartedTask] = []
        self._task_type = task_type
        self._task_id = task_id
        self._hook_step_id = hook_step_id
        self._hook_step_name = hook_step_name
        self.api = MemoryApi(self)
        self.cluster = MemoryCluster(self)

    def log(self, message: str) -> None:
        self.messages.append(message)

    # --- tasks

    def start_task(self, task_type: styrmin.TaskType, started_by_step: int) -> _StartedTask:
        if started_by_step != self._hook_step_id:
            raise ApiFailed(f"Step {started_by_step} is not the step of this action.")
        error = self.state.failing_tasks.get(task_type.value)
        status = styrmin.TaskStatus.FAILED if error is not None else styrmin.TaskStatus.SUCCEEDED
        task = _StartedTask(self._task_id + 1 + len(self.started), task_type, status, error)
        self.started.append(task)
        return task

    def task(self, task_id: int) -> styrmin.Task:
        now = _now()
        common = {"deployment": self.deployment, "requested_by": ACTIONS_USERNAME, "created_at": now}
        if task_id == self._task_id:
            step = styrmin.Step(
                id=self._hook_step_id,
                position=0,
                name=self._hook_step_name,
                status=styrmin.TaskStatus.RUNNING,
                started_tasks=[
                    styrmin.StartedTask(id=t.id, type=t.type, status=t.status, error=t.error)
                    for t in self.started
                ],
            )
            return styrmin.Task(
                id=task_id, type=self._task_type, status=styrmin.TaskStatus.RUNNING, steps=[step], **common
            )
        for started in self.started:
            if started.id == task_id:
                return styrmin.Task(
                    id=task_id,
                    type=started.type,
                    status=started.status,
                    error=started.error,
                    started_at=now,
                    ended_at=now,
                    parent_task_id=self._task_id,
                    **common,
                )
        raise ApiFailed(f"Task {task_id} does not exist.")

    # --- workloads and Jobs

    def pod_template(self, component: Component) -> dict[str, Any]:
        """The pod template the chart renders for ``component`` at the running version and configuration."""
        configuration = self.state.deployment_configuration
        declared = self.spec.spec.component(component.name)
        main = declared.container or (component.containers[0].name if component.containers else None)

        def rendered(container: Container, *, is_main: bool) -> dict[str, Any]:
            image = render_image(container.image, self.state.app_version)
            env = dict(container.env)
            if is_main:
                image = configuration.image_for(component.name, self.state.app_version) or image
                env.update(configuration.env.get(component.name, {}))
            entry: dict[str, Any] = {"name": container.name, "image": image}
            if env:
                entry["env"] = [{"name": k, "value": v} for k, v in env.items()]
            return entry

        spec: dict[str, Any] = {
            "containers": [rendered(c, is_main=c.name == main) for c in component.containers],
        }
        if component.init_containers:
            spec["initContainers"] = [rendered(c, is_main=False) for c in component.init_containers]
        return {"metadata": {"labels": {"app": f"{self.deployment}-{component.name}"}}, "spec": spec}

    def job(self, name: str) -> Job:
        for job in self.state.jobs:
            if job.name == name:
                return job
        raise ApiFailed(f"Job {name} is not in the namespace.")

    def replace_job(self, job: Job) -> None:
        self.state = replace(self.state, jobs=[job if j.name == job.name else j for j in self.state.jobs])

    def outcome(self, command: Sequence[str]) -> CommandOutcome:
        """How ``command`` (the Job's argv) ends, as ``State.commands`` says.

        A string command reaches the Job as ``sh -c STRING``: it is found under the string itself,
        then, as any list, under its words joined as a shell line.
        """
        commands = self.state.commands
        argv = list(command)
        if len(argv) == 3 and argv[:2] == ["sh", "-c"] and argv[2] in commands:
            return commands[argv[2]]
        return commands.get(shlex.join(argv), CommandOutcome())

    def action_job(self, job: Job) -> ActionJob:
        labels = {DEPLOYMENT_LABEL: self.deployment, ACTION_JOB_LABEL: "true", TASK_LABEL: str(job.task_id)}
        reason = ""
        if not job.running and not job.succeeded:
            outcome = self.outcome(job.command) if job.command else CommandOutcome(exit_code=1)
            if outcome.timed_out:
                reason = "DeadlineExceeded: Job was active longer than specified deadline"
            else:
                reason = "BackoffLimitExceeded: Job has reached the specified backoff limit"
        return ActionJob(
            name=job.name,
            labels=labels,
            annotations={OUTPUT_READ_ANNOTATION: "true"} if job.output_read else {},
            ended=not job.running,
            succeeded=not job.running and job.succeeded,
            failure_reason=reason,
            resource_version="1",
        )
