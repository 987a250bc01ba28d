"""Prometheus metrics of the server and the agent (each process exposes its own).

The server serves them on ``/metrics``; the agent on its own port when
``STYRMIN_AGENT_METRICS_PORT`` is set. Names start with ``styrmin_``.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from sqlalchemy import Engine

# The database's collectors import SQLAlchemy and the store when they collect: the agent imports this
# module for its own counters and never reads the database.

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60)
_STEP_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

SERVER_REGISTRY = CollectorRegistry(auto_describe=True)
"""The server's process-wide counters; ``server_registry`` adds the process, the Python runtime,
the build and the database's counts for each app's ``/metrics``."""


def _build_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("styrmin-server")
    except PackageNotFoundError:  # run from a source tree that was not installed
        return "unknown"


def _build_info(registry: CollectorRegistry) -> None:
    import platform

    Gauge(
        "styrmin_build_info",
        "Always 1: the version of Styrmin and of Python this process runs, as labels.",
        ["version", "python_version"],
        registry=registry,
    ).labels(_build_version(), platform.python_version()).set(1)


def _runtime_collectors(registry: CollectorRegistry) -> None:
    """The ``process_*`` and ``python_*`` metrics of this process (the client library's defaults)."""
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)


REQUESTS = Counter(
    "styrmin_http_requests",
    "HTTP requests the server answered, by method, route and status code.",
    ["method", "route", "status"],
    registry=SERVER_REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "styrmin_http_request_duration_seconds",
    "Time the server took to answer, by method and route.",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
    registry=SERVER_REGISTRY,
)
AGENT_PROCESSES_GONE = Counter(
    "styrmin_agent_processes_gone",
    "Agent processes this server judged gone (their presence connection closed and they did not "
    "connect again in time), by agent and by whether they ran tasks, which ended failed (a process "
    "that stops on SIGTERM ends its tasks first).",
    ["agent", "with_tasks"],
    registry=SERVER_REGISTRY,
)
CLAIM_LATENCY = Histogram(
    "styrmin_task_claim_latency_seconds",
    "Time from a task's request to an agent claiming it.",
    buckets=_LATENCY_BUCKETS,
    registry=SERVER_REGISTRY,
)
STEP_SECONDS = Histogram(
    "styrmin_step_duration_seconds",
    "Time from a step's start to its end, by how it ended.",
    ["status"],
    buckets=_STEP_BUCKETS,
    registry=SERVER_REGISTRY,
)

AGENT_REGISTRY = CollectorRegistry(auto_describe=True)
"""What the agent's metrics port shows."""
_runtime_collectors(AGENT_REGISTRY)
_build_info(AGENT_REGISTRY)

ACTIONS_RUNNING = Gauge(
    "styrmin_agent_actions_running", "Actions the agent runs now.", registry=AGENT_REGISTRY
)
TASKS_RUNNING = Gauge("styrmin_agent_tasks_running", "Tasks the agent runs now.", registry=AGENT_REGISTRY)
RUNNER_POOL_SIZE = Gauge(
    "styrmin_agent_runner_pool_size",
    "Pre-started action processes the agent keeps.",
    registry=AGENT_REGISTRY,
)
RUNNER_PROCESSES_READY = Gauge(
    "styrmin_agent_runner_processes_ready",
    "Pre-started action processes ready now: at 0, the next action waits for one to start.",
    registry=AGENT_REGISTRY,
)
AGENT_CLAIM_SECONDS = Histogram(
    "styrmin_agent_claim_duration_seconds",
    "Time one claim call took, long poll included.",
    buckets=_LATENCY_BUCKETS,
    registry=AGENT_REGISTRY,
)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def counts_running_action(run: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """Count the calls of the coroutine function ``run`` in ``styrmin_agent_actions_running`` while they run."""

    @functools.wraps(run)
    async def counted(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        ACTIONS_RUNNING.inc()
        try:
            return await run(*args, **kwargs)
        finally:
            ACTIONS_RUNNING.dec()

    return counted


class _TasksByTypeAndStatus(Collector):
    """``styrmin_tasks``: the number of tasks by type and status, counted in the database at each scrape."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from sqlalchemy import func, select
        from sqlalchemy.exc import SQLAlchemyError

        from styrmin_backend.store.models import TaskRow

        family = self._family()
        try:
            with self._engine.connect() as connection:
                rows = connection.execute(
                    select(TaskRow.type, TaskRow.status, func.count()).group_by(TaskRow.type, TaskRow.status)
                ).all()
        except SQLAlchemyError:  # the scrape still shows the other metrics; /readyz says what is wrong
            rows = []
        for task_type, status, count in rows:
            family.add_metric([task_type, status], count)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("styrmin_tasks", "Tasks by type and status.", labels=["type", "status"])


class _DeploymentStatus(Collector):
    """``styrmin_deployment_status``: 1 for each deployment's status, 0 for its other statuses, as
    the status rule decides it at each scrape (as kube-state-metrics shows a pod's phase)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from sqlalchemy.exc import SQLAlchemyError
        from sqlalchemy.orm import Session

        from styrmin_backend.domain.status import DeploymentStatus
        from styrmin_backend.services import changes, deployment_status

        family = self._family()
        try:
            with Session(self._engine) as session:
                deployments = changes.list_deployments(session)
                statuses = deployment_status.statuses_of(session, deployments)
        except SQLAlchemyError:  # the scrape still shows the other metrics; /readyz says what is wrong
            deployments, statuses = [], {}
        for deployment in deployments:
            current = statuses[deployment.id].state
            for state in DeploymentStatus:
                if state is not DeploymentStatus.DELETED:
                    family.add_metric([deployment.name, state.value], 1.0 if state is current else 0.0)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "styrmin_deployment_status",
            "1 for the status each deployment has now, 0 for the others.",
            labels=["deployment", "status"],
        )


def server_registry(engine: Engine) -> CollectorRegistry:
    """The server's counters plus the process, Python and build metrics and the task counts and
    deployment statuses of ``engine``'s database (a fresh registry per app)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Shared(SERVER_REGISTRY))
    _runtime_collectors(registry)
    _build_info(registry)
    registry.register(CachedCollector(_TasksByTypeAndStatus(engine)))
    registry.register(CachedCollector(_DeploymentStatus(engine)))
    return registry


DATABASE_METRICS_SECONDS = 5.0
"""How long the database's counts and statuses on ``/metrics`` are answered again before being read
anew: far below a Prometheus scrape interval, and a flood of requests costs one read per period."""


class CachedCollector(Collector):
    """``source``'s metrics, collected again only once ``seconds`` have gone by since the last time.

    ``/metrics`` needs no credentials, and the task counts read the whole tasks table: each request
    reading it again would let any caller make the server's work grow with the history.
    """

    def __init__(
        self,
        source: Collector,
        seconds: float = DATABASE_METRICS_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._collected_at: float | None = None
        self._families: list[object] = []

    def describe(self) -> Iterator[object]:  # type: ignore[override]
        return iter(self._source.describe())  # type: ignore[attr-defined]

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        with self._lock:  # requests at once wait for one read, then share it
            now = self._clock()
            if self._collected_at is None or now - self._collected_at >= self._seconds:
                self._families = list(self._source.collect())
                self._collected_at = now
            families = self._families
        yield from families


class _Shared(Collector):
    """Everything in another registry, so several apps in one process share the process-wide counters."""

    def __init__(self, source: CollectorRegistry) -> None:
        self._source = source

    def describe(self) -> Iterator[object]:
        return iter(())

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        yield from self._source.collect()


def observe_agent_process_gone(agent: str, *, with_tasks: bool) -> None:
    """Count an agent process judged gone (see api.routes.agent.presence)."""
    AGENT_PROCESSES_GONE.labels(agent=agent, with_tasks=str(with_tasks).lower()).inc()


def observe_claim(created_at: datetime, started_at: datetime | None) -> None:
    """Record how long a task waited between its request and its claim."""
    if started_at is not None:
        CLAIM_LATENCY.observe(max(0.0, (started_at - created_at).total_seconds()))


def observe_step(status: str, started_at: datetime | None, ended_at: datetime | None) -> None:
    """Record the duration of a step that ended."""
    if started_at is not None and ended_at is not None:
        STEP_SECONDS.labels(status).observe(max(0.0, (ended_at - started_at).total_seconds()))


class RequestMetrics:
    """ASGI middleware counting requests and timing them, by route template (never the raw path)."""

    def __init__(self, app: object) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # type: ignore[operator]
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def record_status(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])  # type: ignore[call-overload]
            await send(message)  # type: ignore[operator]

        try:
            await self.app(scope, receive, record_status)  # type: ignore[operator]
        finally:
            template = _route_template(scope)
            method = str(scope.get("method", ""))
            REQUESTS.labels(method, template, str(status["code"])).inc()
            REQUEST_SECONDS.labels(method, template).observe(time.perf_counter() - started)


def _route_template(scope: dict[str, object]) -> str:
    """The path with each path parameter's value put back as ``{name}``; "unmatched" for no route."""
    if scope.get("route") is None and scope.get("endpoint") is None:
        return "unmatched"
    params = scope.get("path_params") or {}
    names = {str(value): name for name, value in params.items()}  # type: ignore[attr-defined]
    segments = str(scope.get("path", "")).split("/")
    return "/".join(f"{{{names[segment]}}}" if segment in names else segment for segment in segments)
