"""No deadlock and no silent hang: many changes at once on a small agent, a start undone by a later
stop, and the Prefect server killed mid-run, on the real stack."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from lightkube.resources.apps_v1 import Deployment

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.steps import STOP_STEP

from .conftest import Stack, action, start_agent

pytestmark = pytest.mark.slow


def _body(name: str, version: str, cluster: str) -> dict[str, Any]:
    return {"name": name, "namespace": name, "driver": "shop", "driver_version": version, "cluster": cluster}


def _request(stack: Stack, method: str, path: str, **body: Any) -> int:
    """Request a change as an operator; returns its task's id."""
    response = stack.http.request(method, path, json=body or None)
    assert response.status_code == 202, response.text
    task_id: int = response.json()["task"]["id"]
    return task_id


@pytest.fixture
def small_agent(stack: Stack, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """An agent of a cluster of its own that runs 2 tasks at once; yields the cluster's name."""
    cluster = "c" + str(abs(hash(request.node.name)) % 10**6)
    key = stack.http.post("/api/v1/agents", json={"name": cluster, "cluster": cluster}).json()["key"]
    agent = start_agent(stack, key, tmp_path / "agent", concurrency=2, runner_pool_size=2)
    try:
        yield cluster
    finally:
        agent.terminate()
        try:
            agent.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(10)


def test_upgrades_beyond_the_agents_concurrency_all_succeed(stack: Stack, small_agent: str) -> None:
    # Each upgrade's action starts three tasks and waits for each: with 2 slots and 5 upgrades, the
    # tasks the actions start must run beside their parents, never wait for a slot.
    stack.push("12.1.0")
    stack.push("12.2.0", [action("upgrade", "upgrade", "core", "stops_upgrades_starts")])
    names = [f"busy{i}" for i in range(5)]
    creates = [
        _request(stack, "POST", "/api/v1/deployments", **_body(n, "12.1.0", small_agent)) for n in names
    ]
    for task_id in creates:
        assert stack.wait(task_id, timeout=600)["status"] == "succeeded"
    upgrades = [
        _request(
            stack, "POST", f"/api/v1/deployments/{n}/upgrade", app_version="2.0.0", driver_version="12.2.0"
        )
        for n in names
    ]
    ended = [stack.wait(task_id, timeout=900) for task_id in upgrades]
    for task in ended:
        assert task["status"] == "succeeded", task
        (hook,) = task["steps"]
        assert hook["name"] == hook_step_name(Hook.UPGRADE, Mode.CORE)
        started = hook["started_tasks"]
        assert [(t["type"], t["status"]) for t in started] == [
            ("stop", "succeeded"),
            ("upgrade", "succeeded"),
            ("start", "succeeded"),
        ], hook
    for name in names:
        shown = stack.http.get(f"/api/v1/deployments/{name}").json()
        assert (shown["status"], shown["running_app_version"]) == ("running", "2.0.0"), shown
        worker = stack.kube.get(Deployment, f"{name}-task-worker", namespace=name)
        assert worker.spec is not None and worker.spec.replicas == 1


def test_a_start_that_a_later_stop_undoes_ends_at_once_saying_why(
    stack: Stack, tmp_path: Path, deployment_name: str
) -> None:
    stack.push("13.1.0")
    cluster = "late" + deployment_name[-5:]
    key = stack.http.post("/api/v1/agents", json={"name": cluster, "cluster": cluster}).json()["key"]
    agent = start_agent(stack, key, tmp_path / "agent", runner_pool_size=1)
    try:
        created = _request(stack, "POST", "/api/v1/deployments", **_body(deployment_name, "13.1.0", cluster))
        assert stack.wait(created, timeout=600)["status"] == "succeeded"
        stop = _request(
            stack, "POST", f"/api/v1/deployments/{deployment_name}/stop", components=["task-worker"]
        )
        assert stack.wait(stop)["status"] == "succeeded"
    finally:
        agent.terminate()
        agent.wait(60)
    # With no agent serving, a start is requested, then a stop: both wait for the agent.
    start = _request(
        stack, "POST", f"/api/v1/deployments/{deployment_name}/start", components=["task-worker"]
    )
    later_stop = _request(
        stack, "POST", f"/api/v1/deployments/{deployment_name}/stop", components=["task-worker"]
    )
    agent = start_agent(stack, key, tmp_path / "agent", runner_pool_size=1)
    try:
        # Before, the start waited 600 s for replicas its own apply had left at zero, then failed
        # with an empty error; the generous wait here is still far below that.
        started = stack.wait(start, timeout=300)
        stopped = stack.wait(later_stop, timeout=300)
    finally:
        agent.terminate()
        agent.wait(60)
    assert started["status"] == "failed"
    assert started["error"].startswith(
        f'Cannot start task-worker of deployment "{deployment_name}": a later change stops it again'
    ), started
    assert stopped["status"] == "succeeded" and [s["name"] for s in stopped["steps"]] == [STOP_STEP]
    worker = stack.kube.get(Deployment, f"{deployment_name}-task-worker", namespace=deployment_name)
    assert worker.spec is not None and worker.spec.replicas == 0


def _prefect_server_pid(stack: Stack) -> int:
    """The process of the stack's Prefect server (`prefect server start ... --port PORT`)."""
    port = str(urlparse(stack.prefect_api_url).port)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "server" in words and "start" in words and "--port" in words and port in words:
            return int(entry.name)
    raise AssertionError(f"No Prefect server process listens on port {port}")


def _wait_for_running_action(stack: Stack, task_id: int) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        steps = stack.http.get(f"/api/v1/tasks/{task_id}").json()["steps"]
        if steps and steps[-1]["flow_run_id"] is not None and steps[-1]["status"] == "running":
            return
        time.sleep(0.2)
    raise AssertionError(f"the action of task {task_id} never ran: {steps}")


def test_prefect_killed_mid_run_fails_the_task_naming_it_and_the_agent_recovers(
    stack: Stack, deployment_name: str
) -> None:
    stack.push("14.1.0", [action("slow", "setup", "pre", "sleeps")])
    task_id = _request(stack, "POST", "/api/v1/deployments", **_body(deployment_name, "14.1.0", "local"))
    _wait_for_running_action(stack, task_id)
    killed = _prefect_server_pid(stack)
    os.kill(killed, signal.SIGKILL)

    task = stack.wait(task_id, timeout=300)
    stopped_run = task["steps"][0]["flow_run_id"]
    assert task["status"] == "failed"
    assert task["error"].startswith(f"The Prefect server at {stack.prefect_api_url} is not reachable: "), task
    assert "Styrmin stopped the action(s) that were running: slow." in task["error"]

    # `styrmin up` starts its Prefect server again, and the agent serves again by itself.
    deadline = time.monotonic() + 300
    while True:
        try:
            restarted = _prefect_server_pid(stack)
        except AssertionError:
            restarted = None
        if restarted is not None and restarted != killed:
            break
        assert time.monotonic() < deadline, "the Prefect server was not started again"
        time.sleep(0.5)
    # The change is requested once the new Prefect server answers (it may take a while to start).
    while not _answers(stack):
        assert time.monotonic() < deadline, "the restarted Prefect server does not answer"
        time.sleep(0.5)
    stack.push("14.2.0", [action("pre", "setup", "pre", "announce")])
    again = _request(stack, "POST", "/api/v1/deployments", **_body(deployment_name + "b", "14.2.0", "local"))
    task = stack.wait(again, timeout=600)
    assert task["status"] == "succeeded", task
    assert task["steps"][0]["flow_run_id"]
    # The flow run the outage stopped does not stay Running in the Prefect UI.
    deadline = time.monotonic() + 300
    while (state := _flow_run_state(stack, stopped_run)) == "RUNNING":
        assert time.monotonic() < deadline, "the stopped flow run still shows Running"
        time.sleep(1)
    assert state in ("CRASHED", "CANCELLED"), state


def _answers(stack: Stack) -> bool:
    """Whether the stack's Prefect server answers its health check."""
    try:
        return httpx.get(f"{stack.prefect_api_url}/health", timeout=60).status_code == 200
    except httpx.HTTPError:
        return False


def _flow_run_state(stack: Stack, flow_run_id: str) -> str:
    response = httpx.get(f"{stack.prefect_api_url}/flow_runs/{flow_run_id}", timeout=60)
    response.raise_for_status()
    state: str = response.json()["state_type"]
    return state
