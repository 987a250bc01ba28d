"""An agent asked to stop (SIGTERM): it claims nothing more, gives running tasks their grace period,
then ends the rest failed, saying so; its metrics show the action while it runs."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.loopback import free_port

from .conftest import Stack, action, start_agent

pytestmark = pytest.mark.slow


def _metric(port: int, name: str) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    except httpx.TransportError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def test_stopped_agent_ends_a_task_over_its_grace_period_failed(stack: Stack, tmp_path: Path) -> None:
    key = stack.http.post("/api/v1/agents", json={"name": "stopping", "cluster": "stopping"}).json()["key"]
    stack.push("8.2.0", [action("slow", "setup", "pre", "sleeps")])
    port = free_port()
    agent = start_agent(
        stack,
        key,
        tmp_path / "agent",
        stop_grace_seconds=2,
        metrics_port=port,
    )
    try:
        body = {
            "name": "stopping",
            "namespace": "stopping",
            "driver": "shop",
            "driver_version": "8.2.0",
            "cluster": "stopping",
        }
        created = stack.http.post("/api/v1/deployments", json=body)
        assert created.status_code == 202, created.text
        task_id = created.json()["task"]["id"]
        deadline = time.monotonic() + 120
        while _metric(port, "styrmin_agent_actions_running") != 1.0:
            assert time.monotonic() < deadline, "the action did not start"
            time.sleep(0.2)
        assert _metric(port, "styrmin_agent_tasks_running") == 1.0
        pool_size = _metric(port, "styrmin_agent_runner_pool_size")
        assert pool_size is not None
        # The process running the action left the pool; the others wait, ready, for the next actions.
        ready = _metric(port, "styrmin_agent_runner_processes_ready")
        assert ready is not None and 0 <= ready < pool_size, (ready, pool_size)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(120) == 0
        second = stack.http.post("/api/v1/deployments", json={**body, "name": "after", "namespace": "after"})
        assert second.status_code == 202
    finally:
        if agent.poll() is None:
            agent.kill()
    task = stack.http.get(f"/api/v1/tasks/{task_id}").json()
    assert task["status"] == "failed"
    assert "did not end within its grace period (2 s)" in task["error"]
    assert [s["status"] for s in task["steps"]] == ["failed"]
    # The stopped agent claimed nothing more.
    after = stack.http.get(f"/api/v1/tasks/{second.json()['task']['id']}").json()
    assert after["status"] == "pending"
