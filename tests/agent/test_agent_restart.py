"""An agent killed in the middle of a workflow: its task ends failed, saying so; nothing stays running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from styrmin_backend.agent.prefect import LocalPrefectServer
from styrmin_localcluster import LocalCluster

from .conftest import Stack, action

pytestmark = pytest.mark.slow


def start_agent(
    stack: Stack, key: str, cluster: LocalCluster, prefect: LocalPrefectServer, data: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "STYRMIN_AGENT_SERVER_URL": stack.url,
        "STYRMIN_AGENT_KEY": key,
        "STYRMIN_AGENT_KUBECONFIG": str(cluster.kubeconfig_path),
        "STYRMIN_AGENT_PREFECT_API_URL": prefect.api_url,
        "STYRMIN_AGENT_DATA_DIR": str(data),
        "STYRMIN_AGENT_LEASE_SECONDS": "5",
        "STYRMIN_AGENT_POLL_SECONDS": "0.2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", "agent"], env=env, start_new_session=True
    )


def test_killed_agent_leaves_no_task_running(
    stack: Stack, local_cluster: LocalCluster, prefect_server: LocalPrefectServer, tmp_path: Path
) -> None:
    key = stack.http.post("/api/v1/agents", json={"name": "edge", "cluster": "edge"}).json()["key"]
    stack.push("8.1.0", [action("slow", "setup", "pre", "sleeps")])
    first = start_agent(stack, key, local_cluster, prefect_server, tmp_path / "a")
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
            if steps and steps[0]["flow_run_id"] is None and steps[0]["status"] == "running":
                break
            time.sleep(0.2)
        time.sleep(1)
        os.killpg(first.pid, signal.SIGKILL)  # the agent and its action processes, as a crash would
        first.wait(10)
        second = start_agent(stack, key, local_cluster, prefect_server, tmp_path / "b")
        try:
            task = stack.wait(task_id, timeout=90)
        finally:
            second.terminate()
            second.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert task["status"] == "failed"
    assert task["error"].startswith("The agent stopped while it ran this task")
    assert [s["status"] for s in task["steps"]] == ["failed"]
    assert stack.http.get("/api/v1/deployments/restarted").json()["status"] == "failed"
