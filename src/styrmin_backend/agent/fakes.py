"""In-memory fakes of the agent's ports, to run a reconciliation in milliseconds in tests.

Each fake records what the reconciliation asked of it, in the terms a user reads (steps, notes, the
task's end), and can be told to fail. They share one picture of the deployment: :class:`FakeHelm`
applies a chart to the workloads of :class:`FakeCluster`. Whole-stack tests still run the real
adapters (``adapters``); these never replace them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from styrmin_backend.agent.backup_storage import StorageError
from styrmin_backend.agent.ports import (
    ChartRequest,
    ContainerView,
    FlowRunStarted,
    LinkedTask,
    Ports,
    PreparedChart,
    WorkloadKey,
    WorkloadView,
)
from styrmin_backend.cluster import ClusterError, ReplicasChanged
from styrmin_backend.domain.backups import BackupFile, missing_files
from styrmin_backend.drivers import DriverSpec
from styrmin_backend.protocol import ComponentStatus, TaskResult

# --- Styrmin's API --------------------------------------------------------------------------------


@dataclass
class FakeStep:
    """A step as the fake server recorded it."""

    id: int
    task_id: int
    name: str
    ended: bool = False
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    flow_run_id: str | None = None

    @property
    def status(self) -> str:
        if not self.ended:
            return "running"
        return "failed" if self.error is not None else "succeeded"


@dataclass
class FakeTaskEnd:
    """How the task ended, as the fake server recorded it."""

    error: str | None
    result: TaskResult | None
    components: list[ComponentStatus] | None
    released_helm_locks: bool = False

    @property
    def status(self) -> str:
        return "failed" if self.error is not None else "succeeded"


class FakeStyrminServer:
    """Styrmin's API, in memory: the steps and the end of each task."""

    def __init__(self) -> None:
        self.steps: list[FakeStep] = []
        self.ends: dict[int, FakeTaskEnd] = {}
        self.reported: list[tuple[str, list[ComponentStatus]]] = []

    def _step(self, step_id: int) -> FakeStep:
        return self.steps[step_id - 1]

    def steps_of(self, task_id: int) -> list[FakeStep]:
        return [s for s in self.steps if s.task_id == task_id]

    async def add_step(self, task_id: int, name: str) -> int:
        self.steps.append(FakeStep(len(self.steps) + 1, task_id, name))
        return len(self.steps)

    async def add_note(self, step_id: int, note: str) -> None:
        self._step(step_id).notes.append(note)

    async def set_flow_run(self, step_id: int, flow_run_id: str) -> None:
        self._step(step_id).flow_run_id = flow_run_id

    async def end_step(self, step_id: int, error: str | None) -> None:
        step = self._step(step_id)
        if not step.ended:
            step.ended, step.error = True, error

    async def end_task(
        self,
        task_id: int,
        error: str | None,
        result: TaskResult | None,
        components: list[ComponentStatus] | None = None,
        last_step_id: int | None = None,
        release_helm_locks: bool = False,
    ) -> None:
        if last_step_id is not None:
            last = self._step(last_step_id)
            if error is not None or last.task_id != task_id:
                raise ValueError(
                    "last_step_id: a step of this task, with a task that succeeds (as the server)"
                )
            last.ended = True  # in the same call, as the server ends it
        for step in self.steps_of(task_id):  # the task's end ends a step still running, failed
            if not step.ended:
                step.ended, step.error = True, error
        self.ends[task_id] = FakeTaskEnd(error, result, components, release_helm_locks)

    async def report_components(self, deployment: str, components: list[ComponentStatus]) -> None:
        self.reported.append((deployment, components))


@dataclass
class FakeLinkedChanges:
    """Linked changes, in memory: each upgrade requested, and how its task ends."""

    ends_with: LinkedTask | None = field(default_factory=lambda: LinkedTask(id=1000, failed=False))
    requested: list[dict[str, Any]] = field(default_factory=list)

    async def upgrade_and_wait(
        self,
        url: str,
        token: str,
        deployment: str,
        *,
        app_version: str,
        driver_version: str,
        started_by_step: int,
    ) -> LinkedTask | None:
        self.requested.append(
            {
                "deployment": deployment,
                "app_version": app_version,
                "driver_version": driver_version,
                "started_by_step": started_by_step,
            }
        )
        return self.ends_with


# --- the cluster and Helm ---------------------------------------------------------------------------


class FakeCluster:
    """The deployment's cluster, in memory: StyrminDeployments, workloads and Secrets."""

    def __init__(self) -> None:
        self.styrmin_deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespaces: set[str] = set()
        self.workloads: dict[tuple[str, str, str], WorkloadView] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.scaled_by_others: dict[str, tuple[int, int | None]] = {}
        """Workload name -> the replicas another change asks for while a task waits for them, and the
        revision that change writes (None: someone outside Styrmin)."""

    def action_env(self) -> dict[str, str]:
        return {"KUBECONFIG": "/fake/kubeconfig"}

    async def ensure_namespace(self, namespace: str) -> None:
        self.namespaces.add(namespace)

    async def write_styrmin_deployment(
        self, namespace: str, name: str, spec: dict[str, Any], revision: int
    ) -> int | None:
        current = self.styrmin_deployments.get((namespace, name))
        if current is not None and current["revision"] > revision:
            return int(current["revision"])
        self.styrmin_deployments[(namespace, name)] = {**spec, "revision": revision}
        return None

    async def styrmin_deployment_revision(self, namespace: str, name: str) -> int | None:
        current = self.styrmin_deployments.get((namespace, name))
        return None if current is None else int(current["revision"])

    async def delete_styrmin_deployment(self, namespace: str, name: str) -> None:
        self.styrmin_deployments.pop((namespace, name), None)

    async def workload(self, namespace: str, kind: str, name: str) -> WorkloadView:
        try:
            return self.workloads[(namespace, kind, name)]
        except KeyError:
            raise ClusterError(f"{kind} {namespace}/{name} could not be read: not found") from None

    async def component_workloads(self, kinds: Collection[str]) -> dict[WorkloadKey, WorkloadView]:
        return {WorkloadKey(*key): view for key, view in self.workloads.items() if key[1] in kinds}

    async def deployment_workloads(
        self, namespace: str, deployment: str, kinds: Collection[str]
    ) -> dict[WorkloadKey, WorkloadView]:
        # Labels are not kept here: every workload of the namespace counts as the deployment's.
        return {
            WorkloadKey(*key): view
            for key, view in self.workloads.items()
            if key[0] == namespace and key[1] in kinds
        }

    async def wait_scaled(self, namespace: str, kind: str, name: str, replicas: int, timeout: float) -> None:
        asked = (await self.workload(namespace, kind, name)).replicas
        if name in self.scaled_by_others:
            asked, revision = self.scaled_by_others[name]
            for (held_in, _), record in self.styrmin_deployments.items():
                if revision is not None and held_in == namespace:
                    record["revision"] = revision
        if asked != replicas:
            raise ReplicasChanged(
                f"{kind} {namespace}/{name} now asks for {asked} replicas, not {replicas}.", asked
            )

    async def write_secret(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> None:
        self.secrets[(namespace, name)] = dict(data)


@dataclass(frozen=True)
class FakeChart:
    """A chart the fake Helm 'rendered': the request it was rendered from, and the replicas it
    configures for each component workload."""

    request: ChartRequest
    replicas: dict[tuple[str, str], int]

    def configured_replicas(self) -> dict[tuple[str, str], int]:
        return dict(self.replicas)

    async def discard(self) -> None:
        return None


def _but_replicas(request: ChartRequest) -> ChartRequest:
    return replace(request, stopped_components=(), is_upgrade=True)


class FakeHelm:
    """Helm, in memory: each chart applied sets the component workloads of ``cluster``.

    Args:
        cluster: whose workloads an apply sets (replicas: 0 when stopped, else ``replicas``).
        replicas: the replicas the chart sets for each component (1 when not given).
    """

    def __init__(self, cluster: FakeCluster, replicas: Mapping[str, int] | None = None) -> None:
        self.cluster = cluster
        self.replicas = dict(replicas or {})
        self.applied: list[ChartRequest] = []
        """The charts applied by a Helm install or upgrade."""
        self.scaled_in_place: list[ChartRequest] = []
        """The charts of stops and starts whose replicas were set in place (no Helm upgrade)."""
        self.last_applied: dict[tuple[str, str], ChartRequest] = {}
        self.releases: set[tuple[str, str]] = set()
        self.uninstalled: list[tuple[str, str]] = []
        self.render_error: Exception | None = None
        self.apply_error: Exception | None = None
        self.recovered: str | None = None
        """What an apply says it undid first (a pending release's rollback), once."""

    async def prepare(self, request: ChartRequest) -> PreparedChart:
        await asyncio.sleep(0)
        if self.render_error is not None:
            raise self.render_error
        replicas: dict[tuple[str, str], int] = {
            (c.workload.kind, c.workload.resolved_name(request.release)): self.replicas.get(c.name, 1)
            for c in request.spec.spec.components
        }
        return FakeChart(request, replicas)

    async def apply(
        self, chart: PreparedChart, release: str, namespace: str, timeout: int, *, replicas_only: bool = False
    ) -> str | None:
        assert isinstance(chart, FakeChart)
        last = self.last_applied.pop((namespace, release), None)
        if self.apply_error is not None:
            raise self.apply_error
        request = chart.request
        if replicas_only and last is not None and _but_replicas(last) == _but_replicas(request):
            self.scaled_in_place.append(request)  # as the real port: the same release but for replicas
        else:
            self.applied.append(request)
        self.last_applied[(namespace, release)] = request
        self.releases.add((namespace, release))
        for component in request.spec.spec.components:
            configured = self.replicas.get(component.name, 1)
            replicas = 0 if component.name in request.stopped_components else configured
            name = component.workload.resolved_name(release)
            container = component.container or "main"
            image = request.configuration.image_for(component.name, request.app_version)
            self.cluster.workloads[(namespace, component.workload.kind, name)] = WorkloadView(
                replicas=replicas,
                ready_replicas=replicas,
                containers=(
                    ContainerView(container, image or f"example.com/{component.name}:{request.app_version}"),
                ),
                configured_replicas=configured,
            )
        recovered, self.recovered = self.recovered, None
        return recovered

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        self.uninstalled.append((namespace, release))
        self.last_applied.pop((namespace, release), None)
        if (namespace, release) not in self.releases:
            return False
        self.releases.discard((namespace, release))
        for key in [k for k in self.cluster.workloads if k[0] == namespace]:
            del self.cluster.workloads[key]
        return True

    async def settled(self, *, with_end: bool = False) -> bool:
        return False


# --- actions and drivers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeActionOutcome:
    """How a fake action's run ended."""

    succeeded: bool
    error: str | None = None


@dataclass(frozen=True)
class FakeActionRun:
    """An action the fake runner ran, with what it was given."""

    name: str
    location: str
    parameters: Mapping[str, Any]
    env: Mapping[str, str]
    timeout: float
    flow_run_name: str | None
    tags: tuple[str, ...]


FakeActionBody = Callable[[FakeActionRun], Awaitable[None] | None]


class FakeActionRunner:
    """Runs actions in memory: each succeeds unless told to fail; a body may act as the action would."""

    def __init__(self) -> None:
        self.runs: list[FakeActionRun] = []
        self._errors: dict[str, str] = {}
        self._bodies: dict[str, FakeActionBody] = {}

    def fail(self, function: str, error: str) -> None:
        """Make the action whose function is ``function`` fail with ``error``."""
        self._errors[function] = error

    def on_run(self, function: str, body: FakeActionBody) -> None:
        """Run ``body`` when the action whose function is ``function`` runs (before it ends)."""
        self._bodies[function] = body

    @property
    def ran(self) -> list[str]:
        """The function names of the actions run, in the order they started."""
        return [run.name for run in self.runs]

    async def run_action(
        self,
        driver_dir: Path,
        location: str,
        parameters: Mapping[str, Any],
        env: Mapping[str, str],
        timeout: float,
        *,
        flow_run_name: str | None = None,
        tags: Iterable[str] = (),
        on_flow_run: FlowRunStarted | None = None,
    ) -> FakeActionOutcome:
        function = location.rsplit("::", 1)[-1]
        run = FakeActionRun(function, location, parameters, env, timeout, flow_run_name, tuple(tags))
        self.runs.append(run)
        if on_flow_run is not None:
            await on_flow_run(f"flow-run-{len(self.runs)}")
        body = self._bodies.get(function)
        if body is not None:
            done = body(run)
            if done is not None:
                await done
        error = self._errors.get(function)
        return FakeActionOutcome(error is None, error)


class FakeDrivers:
    """Driver versions in memory, by name and version."""

    def __init__(self, specs: Iterable[DriverSpec] = ()) -> None:
        self.specs = {(s.metadata.name, s.metadata.version): s for s in specs}

    def add(self, spec: DriverSpec) -> None:
        self.specs[(spec.metadata.name, spec.metadata.version)] = spec

    async def spec(self, name: str, version: str) -> DriverSpec:
        return self.specs[(name, version)]

    async def folder(self, name: str, version: str) -> Path:
        return Path(f"/fake-drivers/{name}-{version}")


# --- backups ---------------------------------------------------------------------------------------------


class FakeBackupStorage:
    """A backup storage location in memory: each backup's files by its key."""

    def __init__(self) -> None:
        self.stored: dict[str, list[BackupFile]] = {}
        self.staged: dict[str, list[BackupFile]] = {}
        """Files the backup hook's actions 'wrote' into the staging folder (see :meth:`write`)."""
        self.finished: list[str] = []
        self.deleted: list[str] = []
        self.error: str | None = None
        """When set, every operation fails with it (a location that cannot be reached)."""

    def _check(self) -> None:
        if self.error is not None:
            raise StorageError(self.error)

    def write(self, key: str, name: str, content: bytes = b"data") -> None:
        """Stand for a backup action writing file ``name`` into backup ``key``'s folder."""
        import hashlib

        file = BackupFile(name, len(content), hashlib.sha256(content).hexdigest())
        self.staged.setdefault(key, []).append(file)

    def describe(self) -> str:
        return "fake storage"

    def staging(self, key: str) -> Path:
        return Path(str(PurePosixPath("/fake-backups") / key))

    def where(self, key: str) -> str:
        return f"fake storage {key}"

    def prepare(self, key: str) -> Path:
        self._check()
        self.staged.setdefault(key, [])
        return self.staging(key)

    def publish(self, key: str) -> list[BackupFile]:
        self._check()
        self.stored[key] = list(self.staged.get(key, []))
        return self.stored[key]

    def fetch(self, key: str, recorded: list[BackupFile]) -> list[str]:
        self._check()
        return missing_files(recorded, self.stored.get(key, []))

    def finish_restore(self, key: str) -> None:
        self.finished.append(key)

    def delete(self, key: str) -> None:
        self._check()
        self.stored.pop(key, None)
        self.deleted.append(key)

    def probe(self) -> None:
        self._check()

    def job_env(self, key: str) -> dict[str, Any]:
        return {"STYRMIN_BACKUP_DIR": str(self.staging(key))}


class FakeBackupLocations:
    """Backup storage locations in memory: every location is one :class:`FakeBackupStorage`."""

    def __init__(
        self, storage: FakeBackupStorage | None = None, *, bucket_keys: dict[str, str] | None = None
    ) -> None:
        self.storage = storage or FakeBackupStorage()
        self.bucket_keys = bucket_keys
        """The keys backup Jobs get by reference, as for a bucket; None: a folder."""
        self.opened: list[dict[str, Any] | None] = []
        self.error: str | None = None

    async def open(self, location: dict[str, Any] | None) -> FakeBackupStorage:
        self.opened.append(location)
        if self.error is not None:
            raise StorageError(self.error)
        return self.storage

    def job_secret(self, storage: Any) -> dict[str, str] | None:
        return self.bucket_keys


# --- Prefect ---------------------------------------------------------------------------------------------


class FakePrefectHealth:
    """The agent's view of its Prefect server, in memory: up until :meth:`go_away`."""

    def __init__(self, api_url: str = "http://prefect.fake/api") -> None:
        self.api_url = api_url
        self.away = asyncio.Event()
        self.reason: str | None = None

    @property
    def error(self) -> str | None:
        if self.reason is None:
            return None
        return f"The Prefect server at {self.api_url} is unreachable ({self.reason})."

    def go_away(self, reason: str = "connection refused") -> None:
        self.reason = reason
        self.away.set()

    async def check(self, *, fresh_for: float = 0.0) -> str | None:
        return self.reason


# --- all of them -------------------------------------------------------------------------------------------


@dataclass
class FakePorts:
    """One set of fakes sharing one cluster, and the :class:`Ports` over them."""

    server: FakeStyrminServer = field(default_factory=FakeStyrminServer)
    cluster: FakeCluster = field(default_factory=FakeCluster)
    runner: FakeActionRunner = field(default_factory=FakeActionRunner)
    drivers: FakeDrivers = field(default_factory=FakeDrivers)
    linked: FakeLinkedChanges = field(default_factory=FakeLinkedChanges)
    backups: FakeBackupLocations | None = field(default_factory=FakeBackupLocations)
    prefect: FakePrefectHealth | None = None
    helm: FakeHelm = field(init=False)

    def __post_init__(self) -> None:
        self.helm = FakeHelm(self.cluster)

    @property
    def ports(self) -> Ports:
        return Ports(
            server=self.server,
            cluster=self.cluster,
            helm=self.helm,
            runner=self.runner,
            drivers=self.drivers,
            linked=self.linked,
            prefect=self.prefect,
            backup_storage=self.backups,
        )
