"""The probes a cluster calls (/healthz, /readyz) and the Prometheus metrics: public and telling."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import event, text

from styrmin_backend.metrics import DATABASE_METRICS_SECONDS, CachedCollector
from styrmin_backend.store.db import make_engine
from tests.api.conftest import Stack
from tests.api.test_agent_protocol import _deploy


def test_probes_answer_without_a_login(stack: Stack) -> None:
    assert stack.client.get("/healthz").json() == {"status": "ok"}
    ready = stack.client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}


def test_not_ready_while_the_database_schema_is_behind(stack: Stack) -> None:
    with stack.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    ready = stack.client.get("/readyz")
    assert ready.status_code == 503
    assert "styrmin db upgrade" in ready.json()["reason"]
    assert stack.client.get("/healthz").status_code == 200  # alive all the same: no restart loop


def test_not_ready_when_the_database_cannot_be_reached(stack: Stack, tmp_path: Path) -> None:
    stack.client.app.state.engine = make_engine(f"sqlite:///{tmp_path / 'missing' / 'gone.db'}")  # type: ignore[attr-defined]
    ready = stack.client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["reason"].startswith("The database cannot be reached")


def test_metrics_count_requests_by_route_and_tasks_by_type_and_status(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    body = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
    assert stack.client.post("/api/v1/deployments", json=body, headers=admin).status_code == 202
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).status_code == 200
    metrics = stack.client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    lines = metrics.text.splitlines()
    # Requests are counted by route template, never by the raw path (no unbounded label values).
    assert any(
        line.startswith('styrmin_http_requests_total{method="GET",route="/api/v1/deployments/{name}"')
        for line in lines
    ), metrics.text
    assert not any("/api/v1/deployments/shop" in line for line in lines)
    assert 'styrmin_tasks{status="pending",type="create"} 1.0' in lines
    assert any(line.startswith("styrmin_task_claim_latency_seconds_count") for line in lines)


def test_metrics_show_the_process_python_build_and_each_deployments_status(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    body = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
    assert stack.client.post("/api/v1/deployments", json=body, headers=admin).status_code == 202
    lines = stack.client.get("/metrics").text.splitlines()
    assert any(line.startswith("process_resident_memory_bytes ") for line in lines)
    assert any(line.startswith("python_info{") for line in lines)
    assert any(line.startswith("python_gc_objects_collected_total{") for line in lines)
    build = [line for line in lines if line.startswith("styrmin_build_info{")]
    assert len(build) == 1 and 'version="' in build[0] and build[0].endswith(" 1.0")
    # Being created, the deployment is deploying: 1 there, 0 for each other status.
    assert 'styrmin_deployment_status{deployment="shop",status="deploying"} 1.0' in lines
    assert 'styrmin_deployment_status{deployment="shop",status="running"} 0.0' in lines
    assert not any('status="deleted"' in line for line in lines if line.startswith("styrmin_deployment"))


def test_a_flood_of_scrapes_reads_the_database_once_per_period(stack: Stack) -> None:
    """``/metrics`` needs no credentials and counts every task: requests in a row share one read."""
    _deploy(stack)
    first = stack.client.get("/metrics").text.splitlines()
    assert 'styrmin_tasks{status="pending",type="create"} 1.0' in first
    statements: list[str] = []
    listen = lambda *args: statements.append(args[2])  # noqa: E731 - before_cursor_execute's statement
    event.listen(stack.engine, "before_cursor_execute", listen)
    started = time.monotonic()
    try:
        for _ in range(20):
            lines = stack.client.get("/metrics").text.splitlines()
            assert 'styrmin_tasks{status="pending",type="create"} 1.0' in lines
            assert 'styrmin_deployment_status{deployment="shop",status="deploying"} 1.0' in lines
    finally:
        event.remove(stack.engine, "before_cursor_execute", listen)
    # At most one read of each per period gone by (a busy machine may take more than one period for
    # the 20 requests): reading on every request would be 20 of each.
    periods = int((time.monotonic() - started) // DATABASE_METRICS_SECONDS) + 1
    counts = [s for s in statements if "FROM tasks GROUP BY" in s]
    statuses = [s for s in statements if "FROM deployments" in s]
    assert len(counts) <= periods and len(statuses) <= periods, (periods, statements)


def test_a_cached_collector_collects_again_once_its_period_went_by() -> None:
    now = [100.0]
    collected: list[float] = []

    class FakeCountingCollector(Collector):
        """In memory: notes when it was collected, and says how many times."""

        def collect(self) -> Iterator[GaugeMetricFamily]:
            collected.append(now[0])
            yield GaugeMetricFamily("collections", "Collections so far.", value=len(collected))

    cached = CachedCollector(FakeCountingCollector(), seconds=5, clock=lambda: now[0])
    values = []
    for at in (100.0, 101.0, 104.9, 105.0, 106.0, 110.5):
        now[0] = at
        values.append([family.samples[0].value for family in cached.collect()])  # type: ignore[attr-defined]
    assert collected == [100.0, 105.0, 110.5]
    assert values == [[1], [1], [1], [2], [2], [3]]
