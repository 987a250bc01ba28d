"""Each change as a workflow on the whole stack: hooks as Prefect flow runs, the chart through Helm, on the
local cluster. These are the acceptance tests; every change kind's steps, errors, notes and results are
checked in milliseconds on the executor's fakes in test_executor.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.steps import INSTALL_STEP, START_STEP, STOP_STEP
from tests.support.kubectl import run_kubectl

from .conftest import Stack, action

pytestmark = pytest.mark.slow
StyrminDeployment = create_namespaced_resource("styrmin.io", "v1", "StyrminDeployment", "styrmindeployments")


def create(stack: Stack, name: str, version: str, **extra: Any) -> dict[str, Any]:
    body = {"name": name, "namespace": name, "driver": "shop", "driver_version": version, **extra}
    response = stack.http.post("/api/v1/deployments", json=body)
    assert response.status_code == 202, response.text
    return stack.wait(response.json()["task"]["id"])


def step_names(task: dict[str, Any]) -> list[str]:
    return [s["name"] for s in task["steps"]]


def test_create_runs_setup_pre_install_post_and_revokes_the_token(stack: Stack, deployment_name: str) -> None:
    stack.push(
        "21.1.0",
        [action("pre", "setup", "pre", "announce"), action("post", "setup", "post", "checks_token")],
    )
    # A path under a key that does not look secret: secret values reach actions concealed.
    token_file = stack.tmp / f"{deployment_name}.token"
    task = create(stack, deployment_name, "21.1.0", configuration={"values": {"proof_file": str(token_file)}})
    assert task["status"] == "succeeded", task
    assert step_names(task) == [
        hook_step_name(Hook.SETUP, Mode.PRE),
        INSTALL_STEP,
        hook_step_name(Hook.SETUP, Mode.POST),
    ]
    assert all(s["status"] == "succeeded" for s in task["steps"])
    assert task["steps"][0]["flow_run_id"] and task["steps"][2]["flow_run_id"]
    server = stack.kube.get(Deployment, f"{deployment_name}-server", namespace=deployment_name)
    assert server.status is not None and server.status.readyReplicas == 1
    record = stack.kube.get(StyrminDeployment, deployment_name, namespace=deployment_name)
    assert record["spec"]["revision"] == 1 and record["spec"]["appVersion"] == "1.0.0"
    shown = stack.http.get(f"/api/v1/deployments/{deployment_name}").json()
    assert (shown["status"], shown["running_app_version"]) == ("running", "1.0.0")
    seen = {c["name"]: c for c in shown["components_status"]}
    assert (seen["server"]["ready_replicas"], seen["server"]["replicas"]) == (1, 1)
    assert seen["server"]["images"][0] == "example.com/shop/server:1.0.0"
    token = token_file.read_text()  # the action checked that it worked during the run
    assert stack.http.get("/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_a_mode_without_actions_records_no_step_but_the_upgrade_hook_always_runs(
    stack: Stack, deployment_name: str
) -> None:
    stack.push("2.1.0")
    assert create(stack, deployment_name, "2.1.0")["status"] == "succeeded"
    response = stack.http.post(
        f"/api/v1/deployments/{deployment_name}/upgrade", json={"app_version": "2.0.0"}
    )
    task = stack.wait(response.json()["task"]["id"])
    assert task["status"] == "succeeded", task
    assert step_names(task) == ["Run the upgrade hook"]
    server = stack.kube.get(Deployment, f"{deployment_name}-server", namespace=deployment_name)
    assert server.spec is not None and server.spec.template.spec is not None
    images = [c.image for c in server.spec.template.spec.containers]
    assert any(image.endswith(":2.0.0") for image in images), images
    assert stack.http.get(f"/api/v1/deployments/{deployment_name}").json()["running_app_version"] == "2.0.0"


def test_a_crashing_action_shows_its_first_error_log_line_redacted(
    stack: Stack, deployment_name: str
) -> None:
    stack.push("4.1.0", [action("post", "setup", "post", "exits")])
    task = create(stack, deployment_name, "4.1.0")
    assert task["status"] == "failed"
    error = task["steps"][-1]["error"]
    assert "Giving up" in error and "hunter2" not in error and "<redacted>" in error


def _helm_revision(stack: Stack, name: str) -> int:
    """The latest revision in the release's Helm history, as `helm history` shows it."""
    config = helm.Config(kubeconfig_path=str(stack.cluster.kubeconfig_path), namespace=name)
    try:
        return max(int(r["revision"]) for r in config.history(name))
    finally:
        config.close()


def _replicas_owners(stack: Stack, name: str, workload: str, home: Path) -> list[tuple[str, str]]:
    """(manager, operation) of each field manager that owns the workload's .spec.replicas (kubectl)."""
    shown = run_kubectl(
        stack.cluster.kubeconfig_path,
        home,
        name,
        "get",
        "deployment",
        workload,
        "-o",
        "json",
        "--show-managed-fields",
    )
    managed = json.loads(shown.stdout)["metadata"]["managedFields"]
    return [
        (m["manager"], m["operation"])
        for m in managed
        if "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})
    ]


def test_stop_and_start_scale_the_component_workloads(
    stack: Stack, deployment_name: str, tmp_path: Path
) -> None:
    stack.push("5.1.0")
    assert create(stack, deployment_name, "5.1.0")["status"] == "succeeded"
    workload = f"{deployment_name}-task-worker"
    installed = _helm_revision(stack, deployment_name)
    stop = stack.http.post(
        f"/api/v1/deployments/{deployment_name}/stop", json={"components": ["task-worker"]}
    )
    task = stack.wait(stop.json()["task"]["id"])
    assert (task["status"], step_names(task)) == ("succeeded", [STOP_STEP])
    replicas = run_kubectl(
        stack.cluster.kubeconfig_path,
        tmp_path,
        deployment_name,
        "get",
        "deployment",
        workload,
        "-o",
        "jsonpath={.spec.replicas}",
    )
    assert replicas.stdout == "0"
    assert stack.http.get(f"/api/v1/deployments/{deployment_name}").json()["status"] == "stopped"
    # Nothing but the replicas changed: they were set in place, as Helm's own field manager, with no
    # Helm upgrade (no revision), and Helm alone still owns them.
    assert _helm_revision(stack, deployment_name) == installed
    owners = _replicas_owners(stack, deployment_name, workload, tmp_path)
    assert len(owners) == 1 and owners[0][1] == "Apply", owners
    # A configuration change is a Helm upgrade, and keeps a stopped component stopped...
    configure = stack.http.put(
        f"/api/v1/deployments/{deployment_name}/configuration",
        json={"values": {"taskWorker": {"replicas": 2}}},
    )
    assert stack.wait(configure.json()["task"]["id"])["status"] == "succeeded"
    assert _helm_revision(stack, deployment_name) == installed + 1
    assert stack.kube.get(Deployment, workload, namespace=deployment_name).spec.replicas == 0  # type: ignore[union-attr]
    # ...and starting it brings the replicas the configuration sets.
    start = stack.http.post(
        f"/api/v1/deployments/{deployment_name}/start", json={"components": ["task-worker"]}
    )
    task = stack.wait(start.json()["task"]["id"])
    assert (task["status"], step_names(task)) == ("succeeded", [START_STEP])
    worker = stack.kube.get(Deployment, workload, namespace=deployment_name)
    assert worker.status is not None and worker.status.readyReplicas == 2
    assert stack.http.get(f"/api/v1/deployments/{deployment_name}").json()["status"] == "running"
    assert _helm_revision(stack, deployment_name) == installed + 1
    assert _replicas_owners(stack, deployment_name, workload, tmp_path) == owners
    # Helm's next upgrade that changes the replicas meets no conflict: they have one owner.
    configure = stack.http.put(
        f"/api/v1/deployments/{deployment_name}/configuration",
        json={"values": {"taskWorker": {"replicas": 1}}},
    )
    assert stack.wait(configure.json()["task"]["id"])["status"] == "succeeded"
    assert stack.kube.get(Deployment, workload, namespace=deployment_name).spec.replicas == 1  # type: ignore[union-attr]
    assert _helm_revision(stack, deployment_name) == installed + 2


def test_an_action_past_its_timeout_is_ended_and_fails_its_step(stack: Stack, deployment_name: str) -> None:
    stack.push("10.1.0", [{**action("slow", "setup", "post", "sleeps"), "timeout": 3}])
    task = create(stack, deployment_name, "10.1.0")
    assert task["status"] == "failed"
    assert step_names(task)[-1] == "Run the setup post-hook"
    assert "3" in task["steps"][-1]["error"] and "Action slow failed" in task["steps"][-1]["error"]


def test_component_status_follows_the_cluster_between_tasks(stack: Stack, deployment_name: str) -> None:
    stack.push("11.1.0")
    assert create(stack, deployment_name, "11.1.0")["status"] == "succeeded"
    # A change made behind Styrmin's back shows up without any task.
    stack.kube.patch(
        Deployment, f"{deployment_name}-task-worker", {"spec": {"replicas": 2}}, namespace=deployment_name
    )
    seen = _components_seen(stack, deployment_name, "task-worker", 2)
    assert (seen["replicas"], seen["ready_replicas"]) == (2, 2)


def _components_seen(stack: Stack, name: str, component: str, replicas: int) -> dict[str, Any]:
    """The component as the deployment shows it, once it shows ``replicas`` ready (a minute at most)."""
    deadline = time.monotonic() + 60
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        shown = stack.http.get(f"/api/v1/deployments/{name}").json()
        seen = {c["name"]: c for c in shown["components_status"] or []}
        if seen.get(component, {}).get("ready_replicas") == replicas:
            break
        time.sleep(0.5)
    return seen.get(component, {})


def test_the_component_workloads_carry_their_deployments_label(
    stack: Stack, deployment_name: str, tmp_path: Path
) -> None:
    stack.push("11.2.0")
    assert create(stack, deployment_name, "11.2.0")["status"] == "succeeded"
    listed = run_kubectl(
        stack.cluster.kubeconfig_path,
        tmp_path,
        "default",
        "get",
        "deployments",
        "--all-namespaces",
        "-l",
        f"styrmin.io/deployment={deployment_name}",
        "-o",
        "name",
    ).stdout.split()
    assert sorted(listed) == [
        f"deployment.apps/{deployment_name}-server",
        f"deployment.apps/{deployment_name}-task-worker",
    ]


def test_a_workload_without_the_label_is_still_reported(stack: Stack, deployment_name: str) -> None:
    """A workload an older agent applied has no deployment label: the listing misses it, and the
    periodic report reads it on its own."""
    stack.push("11.3.0")
    assert create(stack, deployment_name, "11.3.0")["status"] == "succeeded"
    stack.kube.patch(
        Deployment,
        f"{deployment_name}-task-worker",
        {"metadata": {"labels": {"styrmin.io/deployment": None}}, "spec": {"replicas": 2}},
        namespace=deployment_name,
    )
    worker = stack.kube.get(Deployment, f"{deployment_name}-task-worker", namespace=deployment_name)
    assert "styrmin.io/deployment" not in (worker.metadata.labels or {})
    seen = _components_seen(stack, deployment_name, "task-worker", 2)
    assert (seen["replicas"], seen["ready_replicas"]) == (2, 2)
