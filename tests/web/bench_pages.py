"""Benchmark: the deployment page with 1,000 tasks of history and a latest task of 50 steps.

Run: ``uv run python -m tests.web.bench_pages`` (target: p50 <= 100 ms, rendered server-side).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from styrmin_backend.services import auth, changes, workflow
from styrmin_backend.services.changes import Configuration
from styrmin_backend.store.db import make_engine
from styrmin_backend.store.migrate import upgrade_database
from tests.api.conftest import ADMIN_PASSWORD, Stack, make_stack
from tests.web.conftest import login_client

TARGET_MS = 100.0
HISTORY_TASKS = 1000
STEPS = 50


@dataclass(frozen=True)
class Figures:
    """Render times of the pages, in milliseconds."""

    deployment_p50: float
    deployment_p99: float
    task_p50: float
    task_p99: float


def seed(stack: Stack) -> int:
    """A deployment with ``HISTORY_TASKS`` tasks, the newest of ``STEPS`` steps; returns its id."""
    with stack.session() as session:
        admin = auth.authenticate(session, stack.token_for("admin"))
        changes.create_deployment(
            session,
            by=admin,
            name="bench",
            namespace="bench",
            driver_name="shop",
            driver_version="1.0.0",
            app_version=None,
            configuration=Configuration({"extra": {"password": "x"}}, {}, {"server": {"A": "1"}}),
        )
        task = None
        for number in range(HISTORY_TASKS - 1):
            task = changes.upgrade_deployment(
                session, "bench", by=admin, app_version=f"2.0.{number}", driver_version=None
            ).task
        assert task is not None
        workflow.start_task(session, task.id)
        for number in range(STEPS):
            step = workflow.add_step(session, task.id, f"Step {number}")
            workflow.add_step_note(session, step.id, f"note of step {number}")
            if number == STEPS - 1:
                workflow.set_step_output(session, step.id, "line\n" * 200, True)
                workflow.end_step(session, step.id, error="failed")
            else:
                workflow.end_step(session, step.id)
        return task.id


def _times(stack: Stack, path: str, rounds: int) -> list[float]:
    for _ in range(5):
        assert stack.client.get(path).status_code == 200
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        response = stack.client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200
    return sorted(times)


def measure(stack: Stack, rounds: int = 40) -> Figures:
    """Render times of the deployment page and of the 50-step task (after warm-up rounds)."""
    task_id = seed(stack)
    login_client(stack.client, "admin", ADMIN_PASSWORD)
    page = _times(stack, "/deployments/bench", rounds)
    task = _times(stack, f"/tasks/{task_id}", rounds)

    def p99(values: list[float]) -> float:
        return values[min(len(values) - 1, round(len(values) * 0.99))]

    return Figures(statistics.median(page), p99(page), statistics.median(task), p99(task))


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        engine = make_engine(f"sqlite:///{folder / 'bench.db'}")
        upgrade_database(engine)
        stack = make_stack(engine, folder / "data")
        stack.add_driver("1.0.0")
        with stack.client:
            figures = measure(stack)
        engine.dispose()
    print(
        f"deployment page, {HISTORY_TASKS} tasks, latest of {STEPS} steps: p50 {figures.deployment_p50:.1f} ms, p99 {figures.deployment_p99:.1f} ms (target p50 <= {TARGET_MS:.0f} ms)"
    )
    print(
        f"task view, {STEPS} steps: p50 {figures.task_p50:.1f} ms, p99 {figures.task_p99:.1f} ms (target p50 <= {TARGET_MS:.0f} ms)"
    )


if __name__ == "__main__":
    main()
