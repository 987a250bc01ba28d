"""Each change of a deployment runs as its own workflow, side by side; only Helm operations take turns.
And cancelling a task stops its running action, on the whole stack."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job

from styrmin_backend.actions.commands import DEPLOYMENT_LABEL
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.steps import INSTALL_STEP

from .conftest import Stack, action, start_agent

pytestmark = pytest.mark.slow
PRE, CORE, POST = (hook_step_name(Hook.UPGRADE, mode) for mode in (Mode.PRE, Mode.CORE, Mode.POST))


def _until(what: str, check: Callable[[], Any], timeout: float = 180) -> Any:
    """``check()`` once it is truthy; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


def _create(stack: Stack, name: str, version: str, values: dict[str, Any] | None = None) -> None:
    body = {
        "name": name,
        "namespace": name,
        "driver": "shop",
        "driver_version": version,
        "configuration": {"values": values or {}},
    }
    response = stack.http.post("/api/v1/deployments", json=body)
    assert response.status_code == 202, response.text
    assert stack.wait(response.json()["task"]["id"])["status"] == "succeeded"


def _upgrade(stack: Stack, name: str, app_version: str) -> int:
    response = stack.http.post(f"/api/v1/deployments/{name}/upgrade", json={"app_version": app_version})
    assert response.status_code == 202, response.text
    task_id: int = response.json()["task"]["id"]
    return task_id


def _task(stack: Stack, task_id: int) -> dict[str, Any]:
    task: dict[str, Any] = stack.http.get(f"/api/v1/tasks/{task_id}").json()
    return task


def _create_with_a_sleeping_post_hook(stack: Stack, name: str, version: str) -> tuple[int, str]:
    """Request a create whose setup post-hook sleeps; its task id and the hook's flow run, once running."""
    stack.push(version, [action("slow", "setup", "post", "sleeps")])
    response = stack.http.post(
        "/api/v1/deployments",
        json={"name": name, "namespace": name, "driver": "shop", "driver_version": version},
    )
    task_id: int = response.json()["task"]["id"]
    flow_run: str = _until(
        "the post-hook's flow run",
        lambda: next((s["flow_run_id"] for s in _task(stack, task_id)["steps"] if s["flow_run_id"]), None),
    )
    return task_id, flow_run


def _running_job(stack: Stack, name: str) -> str | None:
    for job in stack.kube.list(Job, namespace=name, labels={DEPLOYMENT_LABEL: name}):
        if job.status is not None and job.status.active and job.metadata is not None:
            return job.metadata.name
    return None


def test_a_second_upgrade_runs_beside_a_held_one_and_each_change_runs_its_own_hooks(
    stack: Stack, deployment_name: str
) -> None:
    name = deployment_name
    gate = stack.tmp / f"{name}.migration-gate"
    stack.push(
        "40.1.0",
        [
            action("upgrade", "upgrade", "core", "upgrade_with_held_migration"),
            action("after", "upgrade", "post", "announce"),
        ],
    )
    _create(stack, name, "40.1.0", {"migration_gate": str(gate)})
    first = _upgrade(stack, name, "2.0.0")
    job = _until("the first upgrade's migration Job running", lambda: _running_job(stack, name))

    # The second upgrade does not wait for the first: its action meets the first one's Job.
    second = _upgrade(stack, name, "3.0.0")
    failed = stack.wait(second)
    assert failed["status"] == "failed", failed
    assert _task(stack, first)["status"] == "running"
    core = failed["steps"][-1]
    assert core["name"] == CORE and core["status"] == "failed"
    assert (
        f'Job {job} of an earlier action of deployment "{name}" is still running (task {first}). '
        "Wait for it to end, then request the change again."
    ) in core["error"]
    # Its own upgrade reached the cluster meanwhile: the later revision's version runs there.
    later_upgrade = next(t for t in core["started_tasks"] if t["type"] == "upgrade")
    assert later_upgrade["status"] == "succeeded"
    server = stack.kube.get(Deployment, f"{name}-server", namespace=name)
    assert server.spec is not None and server.spec.template.spec is not None
    assert any(c.image.endswith(":3.0.0") for c in server.spec.template.spec.containers if c.image)

    # Once the Job ends, the first upgrade goes on: its start uses the current configuration (3.0.0),
    # and its post-hook runs though a later change reached the cluster first.
    gate.write_text("go")
    ended = stack.wait(first)
    assert ended["status"] == "succeeded", ended
    assert [s["name"] for s in ended["steps"]] == [CORE, POST]
    assert all(s["status"] == "succeeded" for s in ended["steps"])
    start = next(t for t in ended["steps"][0]["started_tasks"] if t["type"] == "start")
    assert start["status"] == "succeeded"
    assert start["result"]["applied"]["app_version"] == "3.0.0"
    errors = [s["error"] or "" for s in ended["steps"]] + [failed["error"] or ""]
    assert not any("another operation" in error for error in errors)

    # Requested again after the Job ended, the second upgrade runs its hooks to the end.
    again = stack.http.post(f"/api/v1/tasks/{second}/retry")
    assert again.status_code == 202, again.text
    retried = stack.wait(again.json()["task"]["id"])
    assert retried["status"] == "succeeded", retried
    assert [s["name"] for s in retried["steps"]] == [CORE, POST]
    assert any(f"Deleted Job {job}" in note for note in retried["steps"][0]["notes"]), retried["steps"][0]


def test_two_agents_running_one_deployments_changes_never_meet_another_helm_operation(
    stack: Stack, deployment_name: str
) -> None:
    name = deployment_name
    stack.push("41.1.0")
    _create(stack, name, "41.1.0")
    key = stack.http.post("/api/v1/agents", json={"name": f"{name}-second", "cluster": "local"})
    assert key.status_code == 201, key.text
    second = start_agent(stack, key.json()["key"], stack.tmp / f"{name}-agent")
    try:
        changes = []
        for replicas in range(1, 7):
            values = {"server": {"replicas": 1 + replicas % 2}, "round": replicas}
            response = stack.http.put(f"/api/v1/deployments/{name}/configuration", json={"values": values})
            assert response.status_code == 202, response.text
            changes.append(response.json()["task"]["id"])
        ended = [stack.wait(task_id, timeout=300) for task_id in changes]
    finally:
        second.terminate()
        second.wait(60)
    assert [t["status"] for t in ended] == ["succeeded"] * len(changes), [t["error"] for t in ended]
    notes = [note for t in ended for s in t["steps"] for note in s["notes"]]
    assert not any("another operation" in note for note in notes)
    shown = stack.http.get(f"/api/v1/deployments/{name}").json()
    assert shown["status"] == "running" and shown["configuration"]["values"]["round"] == 6


def test_cancelling_a_running_action_stops_it_and_leaves_the_cluster_as_it_is(
    stack: Stack, deployment_name: str
) -> None:
    name = deployment_name
    task_id, flow_run = _create_with_a_sleeping_post_hook(stack, name, "42.1.0")
    cancelled = stack.http.post(f"/api/v1/tasks/{task_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["cancelled_by"] == "admin"
    stopped = _until("the agent stopping the action", lambda: _task(stack, task_id)["stopped_at"], 120)
    assert stopped
    task = _task(stack, task_id)
    assert [(s["name"], s["status"]) for s in task["steps"]] == [
        (INSTALL_STEP, "succeeded"),
        (hook_step_name(Hook.SETUP, Mode.POST), "cancelled"),
    ]
    # Its flow run ends as Cancelled in Prefect (the runner sets it once the process is gone).
    _until(
        "the flow run ending as Cancelled",
        lambda: (
            httpx.get(f"{stack.prefect_api_url}/flow_runs/{flow_run}").json()["state"]["type"] == "CANCELLED"
        ),
        120,
    )
    # What the install did stays: the cluster is left as it was.
    assert stack.kube.get(Deployment, f"{name}-server", namespace=name).metadata is not None
    assert stack.http.get(f"/api/v1/deployments/{name}").json()["status"] == "failed"


def test_cancelling_an_action_s_flow_run_in_prefect_cancels_its_styrmin_task(
    stack: Stack, deployment_name: str
) -> None:
    name = deployment_name
    task_id, flow_run = _create_with_a_sleeping_post_hook(stack, name, "42.2.0")
    # What the Prefect UI's Cancel button sends.
    answer = httpx.post(
        f"{stack.prefect_api_url}/flow_runs/{flow_run}/set_state",
        json={"state": {"type": "CANCELLING", "name": "Cancelling"}, "force": True},
    )
    assert answer.status_code in (200, 201), answer.text
    task = _until(
        "the Styrmin task ending as cancelled",
        lambda: (found := _task(stack, task_id))["status"] == "cancelled" and found["stopped_at"] and found,
        120,
    )
    assert task["cancelled_by"] == f"the Prefect UI (flow run {flow_run})"
    assert [(s["name"], s["status"]) for s in task["steps"]] == [
        (INSTALL_STEP, "succeeded"),
        (hook_step_name(Hook.SETUP, Mode.POST), "cancelled"),
    ]
    _until(
        "the flow run ending as Cancelled",
        lambda: (
            httpx.get(f"{stack.prefect_api_url}/flow_runs/{flow_run}").json()["state"]["type"] == "CANCELLED"
        ),
        120,
    )
    # A cancelled task is retried like a failed one.
    assert stack.http.post(f"/api/v1/tasks/{task_id}/retry").status_code == 202
