"""An agent killed in the middle of a workflow: its task ends failed within seconds, saying so, long
before its lease would run out; nothing stays running, in Styrmin or in Prefect."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Stack, action, start_agent

pytestmark = pytest.mark.slow


def test_killed_agent_leaves_no_task_running(stack: Stack, tmp_path: Path) -> None:
    key = stack.http.post("/api/v1/agents", json={"name": "edge", "cluster": "edge"}).json()["key"]
    stack.push("8.1.0", [action("slow", "setup", "pre", "sleeps")])
    # A lease far longer than the test waits: only the agent's presence connection can end the task.
    first = start_agent(stack, key, tmp_path / "a", lease_seconds=900)
    try:
        body = {
            "name": "restarted",
            "namespace": "restarted",
            "driver": "shop",
            "driver_version": "8.1.0",
            "cluster": "edge",
        }
        created = stack.http.post("/api/v1/deployments", json=body)
        assert created.status_code == 202, created.text
        task_id = created.json()["task"]["id"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            steps = stack.http.get(f"/api/v1/tasks/{task_id}").json()["steps"]
            if steps and steps[0]["flow_run_id"] is not None:  # the action's flow run has started
                break
            time.sleep(0.2)
        # The step links to its flow run while the action still runs.
        assert steps[0]["status"] == "running" and steps[0]["flow_run_id"] is not None, steps
        time.sleep(0.5)
        os.killpg(first.pid, signal.SIGKILL)  # the agent and its action processes, as a crash would
        first.wait(10)
        flow_runs = _flow_runs(stack, "deployment:restarted")
        assert [run["state_type"] for run in flow_runs] == ["RUNNING"]
        # Its process gone, its connection closed with it: the server ends the task, no agent needed.
        task = stack.wait(task_id, timeout=120)
        # Restarted on the same data dir, the agent marks the run its predecessor left Crashed.
        second = start_agent(stack, key, tmp_path / "a")
        try:
            deadline = time.monotonic() + 30
            while _flow_runs(stack, "deployment:restarted")[0]["state_type"] == "RUNNING":
                assert time.monotonic() < deadline, "the orphaned flow run was not marked Crashed"
                time.sleep(0.2)
        finally:
            second.terminate()
            second.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert task["status"] == "failed"
    assert task["error"].startswith("The agent stopped while it ran this task (its process styrmin-agent:")
    assert "closed its connection to Styrmin at " in task["error"], task["error"]
    assert [s["status"] for s in task["steps"]] == ["failed"]
    assert stack.http.get("/api/v1/deployments/restarted").json()["status"] == "failed"
    (crashed,) = _flow_runs(stack, "deployment:restarted")
    assert crashed["state_type"] == "CRASHED"
    assert crashed["state"]["message"].startswith("The Styrmin agent that ran this action stopped")
    assert crashed["id"] == task["steps"][0]["flow_run_id"]


def _flow_runs(stack: Stack, tag: str) -> list[dict[str, Any]]:
    """The flow runs tagged ``tag``, read from the Prefect server's REST API."""
    response = httpx.post(
        f"{stack.prefect_api_url}/flow_runs/filter", json={"flow_runs": {"tags": {"all_": [tag]}}}
    )
    response.raise_for_status()
    runs: list[dict[str, Any]] = response.json()
    return runs
