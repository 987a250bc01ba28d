"""What a reconciliation needs of the outside world, as typed ports.

The executor (``reconciliation``) runs a change's plan through these alone. Each has a real adapter
(``adapters``, or the agent's own classes that already fit: ``ServerApi``, ``HelmReleases``' writes
through :class:`~styrmin_backend.agent.adapters.HelmCharts`, ``ActionRunner``, ``DriverCache``) and an
in-memory fake whose name says so (``fakes``). ``wiring`` puts the real ones together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from styrmin_backend.agent.backup_storage import BackupStorage
from styrmin_backend.drivers import DeploymentConfiguration, DriverSpec
from styrmin_backend.protocol import ComponentStatus, TaskResult


class StyrminServer(Protocol):
    """Styrmin's API as the agent calls it (with its agent key): the steps and the end of a task."""

    async def add_step(self, task_id: int, name: str) -> int:
        """Start a step of the task; its id."""
        ...

    async def add_note(self, step_id: int, note: str) -> None: ...

    async def set_flow_run(self, step_id: int, flow_run_id: str) -> None: ...

    async def end_step(self, step_id: int, error: str | None) -> None:
        """End a step: succeeded (``error`` None) or failed with ``error``."""
        ...

    async def end_task(
        self,
        task_id: int,
        error: str | None,
        result: TaskResult | None,
        components: list[ComponentStatus] | None = None,
        last_step_id: int | None = None,
        release_helm_locks: bool = False,
    ) -> None:
        """End the task (and report the components, end its last step succeeded and let go of its
        Helm locks, when given)."""
        ...

    async def report_components(self, deployment: str, components: list[ComponentStatus]) -> None: ...


@dataclass(frozen=True)
class LinkedTask:
    """How a task that a step requested ended."""

    id: int
    failed: bool
    error: str | None = None


class LinkedChanges(Protocol):
    """Changes a step requests through Styrmin's API with the reconciliation's actions token, linked
    to the step (a restore bringing the backup's version back)."""

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
        """Request the Helm-only upgrade and wait for its task; None when nothing changes."""
        ...


@dataclass(frozen=True)
class ContainerView:
    """A regular container of a component's pod template, as the cluster has it."""

    name: str
    image: str


@dataclass(frozen=True)
class WorkloadView:
    """A component's workload as the cluster has it now: what the agent reads of it."""

    replicas: int
    ready_replicas: int
    containers: tuple[ContainerView, ...] = ()
    configured_replicas: int | None = None
    """The replicas the chart sets (the annotation the agent applied); None when it has none."""


class WorkloadKey(NamedTuple):
    """Where a workload is: its namespace, kind (Deployment or StatefulSet) and name."""

    namespace: str
    kind: str
    name: str


class Cluster(Protocol):
    """The deployment's cluster: its StyrminDeployment, its component workloads and Secrets.

    A workload that cannot be read raises ``ClusterError``; a wait whose workload another change scaled
    raises ``ReplicasChanged`` (both of ``styrmin_backend.cluster``).
    """

    def action_env(self) -> dict[str, str]:
        """The env an action's process needs to reach the cluster (for its primitives)."""
        ...

    async def ensure_namespace(self, namespace: str) -> None: ...

    async def write_styrmin_deployment(
        self, namespace: str, name: str, spec: dict[str, Any], revision: int
    ) -> int | None:
        """Write at ``revision``; the cluster's revision when a later one is there (left unchanged)."""
        ...

    async def styrmin_deployment_revision(self, namespace: str, name: str) -> int | None: ...

    async def delete_styrmin_deployment(self, namespace: str, name: str) -> None: ...

    async def workload(self, namespace: str, kind: str, name: str) -> WorkloadView: ...

    async def component_workloads(self, kinds: Collection[str]) -> dict[WorkloadKey, WorkloadView]:
        """Every workload of ``kinds`` that carries the deployment label the agent applies, in every
        namespace: one listing per kind, where reading each workload costs a request (a round of
        reports over two hundred deployments). Raises ``ClusterError`` when the cluster refuses."""
        ...

    async def deployment_workloads(
        self, namespace: str, deployment: str, kinds: Collection[str]
    ) -> dict[WorkloadKey, WorkloadView]:
        """The workloads of ``kinds`` in ``namespace`` that carry ``deployment``'s label: one listing
        per kind, where reading each component's workload costs a request (a task's end reports
        them). Raises ``ClusterError`` when the cluster refuses."""
        ...

    async def wait_scaled(
        self, namespace: str, kind: str, name: str, replicas: int, timeout: float
    ) -> None: ...

    async def write_secret(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> None: ...


@dataclass(frozen=True)
class ChartRequest:
    """What the chart of a deployment is rendered from: the driver, the target and its configuration."""

    driver_dir: Path
    spec: DriverSpec
    release: str
    namespace: str
    app_version: str
    configuration: DeploymentConfiguration
    stopped_components: tuple[str, ...] = ()
    is_upgrade: bool = False


class PreparedChart(Protocol):
    """A rendered chart, ready to install or upgrade; discard it once applied or left unused."""

    def configured_replicas(self) -> dict[tuple[str, str], int]:
        """(kind, name) of each component workload the chart holds -> the replicas it configures for
        it, a stopped one's included (what a start brings it back to)."""
        ...

    async def discard(self) -> None: ...


class Helm(Protocol):
    """The deployment's Helm release: render its chart, install or upgrade it, uninstall it."""

    async def prepare(self, request: ChartRequest) -> PreparedChart:
        """Render the chart (``RenderError`` / ``ConfigurationError`` when it does not)."""
        ...

    async def apply(
        self, chart: PreparedChart, release: str, namespace: str, timeout: int, *, replicas_only: bool = False
    ) -> str | None:
        """Install or upgrade, waiting until ready; a note on what was undone first, else None.

        ``replicas_only``: the task stops or starts components. When the chart is the release as last
        applied but for its component workloads' replicas, those are set in place, with no Helm
        upgrade (and no revision in the release's history); the caller waits for the replicas.
        """
        ...

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        """Uninstall; False when the release was not installed."""
        ...

    async def settled(self, *, with_end: bool = False) -> bool:
        """Wait for what an operation left running in the background (the Helm lock let go of); with
        ``with_end``, leave to the task's end what it can do instead, and answer whether there is any
        (then the end asks for it: ``release_helm_locks``)."""
        ...


class ActionResult(Protocol):
    """How an action's run ended."""

    @property
    def succeeded(self) -> bool: ...

    @property
    def error(self) -> str | None: ...


FlowRunStarted = Callable[[str], Awaitable[None]]


class ActionRunner(Protocol):
    """Runs a driver's action as a Prefect flow run in a process of its own."""

    def run_action(
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
    ) -> Awaitable[ActionResult]:
        """Run the action at ``location`` of the driver in ``driver_dir``, within ``timeout`` seconds."""
        ...


class PrefectHealth(Protocol):
    """The agent's view of its Prefect server: actions stop when it goes away."""

    api_url: str
    away: asyncio.Event

    @property
    def error(self) -> str | None: ...

    async def check(self, *, fresh_for: float = 0.0) -> str | None:
        """Check now: why the server did not answer, or None. ``fresh_for``: an answer that came
        less than that many seconds ago counts, with no new request."""
        ...


class Drivers(Protocol):
    """The driver versions the agent runs, fetched from the server once."""

    async def spec(self, name: str, version: str) -> DriverSpec: ...

    async def folder(self, name: str, version: str) -> Path:
        """Where ``name@version`` is unpacked (its actions' files)."""
        ...


class BackupLocations(Protocol):
    """The backup storage of a change's location (None: the agent's own folder)."""

    async def open(self, location: dict[str, Any] | None) -> BackupStorage:
        """The storage; ``StorageError`` when it cannot be used."""
        ...

    def job_secret(self, storage: BackupStorage) -> dict[str, str] | None:
        """The keys backup Jobs need by reference (a bucket's), else None."""
        ...


@dataclass(frozen=True)
class Ports:
    """Everything a reconciliation reaches outside itself; the agent's wiring gives the real ones."""

    server: StyrminServer
    cluster: Cluster
    helm: Helm
    runner: ActionRunner
    drivers: Drivers
    linked: LinkedChanges
    prefect: PrefectHealth | None = None
    """The agent's watch of the Prefect server: actions stop when it goes away."""
    backup_storage: BackupLocations | None = None
    """Where backups' files are written and read; None when the agent has none (backups then fail)."""
