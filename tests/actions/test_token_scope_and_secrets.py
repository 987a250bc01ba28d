"""On the whole stack: an action's token reaches only its own deployment, and secrets stay out of
Prefect's flow-run parameters and logs while the action's Job still gets them."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import textwrap
import time
from pathlib import Path

import httpx
import pytest
import yaml
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod, Secret

from styrmin_backend.cluster.kube import StyrminDeployment as StyrminDeploymentResource
from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.domain.limits import REDACTED
from styrmin_backend.drivers.render import SECRET_CHECKSUM_ANNOTATION
from styrmin_backend.testing import StyrminStack, describe, hook_step

from .conftest import action, push_example

pytestmark = pytest.mark.slow

SECRET_ENV = "tok-secret-abcdef-0042"
SECRET_VALUE = "hunter2-value-0042"
TOKEN = re.compile(r"sty_[A-Za-z0-9_-]{20,}")

ACTIONS = textwrap.dedent(
    """
    import os

    import styrmin
    from prefect import flow, get_run_logger

    from styrmin_backend.actions import GlobalContext, execute_commands


    @flow
    async def reach_out(context: GlobalContext, target_version: str) -> None:
        get_run_logger().info("my token is %s", os.environ["STYRMIN_TOKEN"])
        print("printed token", os.environ["STYRMIN_TOKEN"])
        # The Job gets the user's env vars, secret ones included, as the seed says.
        await execute_commands(
            ["sh", "-c", 'test "$API_TOKEN" = "SECRET_ENV_HERE" || exit 7'],
            image=f"example.com/shop/server:{target_version}",
            context=context,
            env_from_component="server",
        )
        refused = []
        async with styrmin.AsyncClient() as client:
            await client.deployments.get(context.deployment_name)  # its own deployment: allowed
            attempts = {
                "stop other": client.deployments.stop(context.deployment_name + "o", ["task-worker"]),
                "create": client.deployments.create(
                    context.deployment_name + "x", namespace="x", driver="shop", driver_version="1.1.0"
                ),
                "push": client.drivers.push(b"not even a driver"),
                "read other": client.deployments.get(context.deployment_name + "o"),
            }
            for what, call in attempts.items():
                try:
                    await call
                    refused.append(f"{what}: ALLOWED")
                except styrmin.ForbiddenError as error:
                    refused.append(f"{what}: {error.status} {error.message}")
        raise RuntimeError(" || ".join(refused))
    """
).replace("SECRET_ENV_HERE", SECRET_ENV)


def _prefect(stack: StyrminStack, path: str, body: dict[str, object]) -> list[dict[str, object]]:
    response = httpx.post(f"{stack.prefect_api_url}{path}", json=body, timeout=60)
    response.raise_for_status()
    found: list[dict[str, object]] = response.json()
    return found


def test_an_action_token_reaches_only_its_deployment_and_secrets_stay_out_of_prefect(
    stack: StyrminStack, deployment_name: str, tmp_path: Path
) -> None:
    push_example(stack, tmp_path, "1.1.0", actions=[])
    push_example(
        stack,
        tmp_path,
        "1.3.0",
        actions_source=ACTIONS,
        actions=[action("reach", "upgrade", "pre", "reach_out")],
    )
    configuration = {
        "values": {"auth": {"password": SECRET_VALUE}},
        "env": {"server": {"API_TOKEN": SECRET_ENV, "LOG_LEVEL": "debug"}},
    }
    created = stack.create(
        deployment_name, driver="shop", driver_version="1.1.0", configuration=configuration
    )
    assert created.status == "succeeded", describe(created)
    other = stack.create(deployment_name + "o", driver="shop", driver_version="1.1.0")
    assert other.status == "succeeded", describe(other)

    task = stack.upgrade(deployment_name, driver_version="1.3.0", app_version="2.0.0")

    step = hook_step(task, Hook.UPGRADE, Mode.PRE)
    error = step.error or ""
    assert "Job" not in error and "exit" not in error, describe(task)  # the Job had the secret env var
    # ... from the deployment's Secret, as the workload has it: the Job's spec holds no secret value.
    # (The command itself names the value to compare with; the env does not.)
    jobs = list(stack.kube.list(Job, namespace=deployment_name))
    job_env = [c.env for job in jobs if job.spec for c in job.spec.template.spec.containers]  # type: ignore[union-attr]
    assert jobs and "secretKeyRef" in str(job_env)
    assert SECRET_ENV not in str(job_env)
    belongs = (
        f'This token belongs to the actions of deployment "{deployment_name}" (task {task.id}); it cannot'
    )
    assert f'stop other: 403 {belongs} act on deployment "{deployment_name}o".' in error
    assert f"create: 403 {belongs} call POST /api/v1/deployments." in error
    assert f"push: 403 {belongs} call POST /api/v1/drivers." in error
    assert f'read other: 403 {belongs} act on deployment "{deployment_name}o".' in error
    assert "ALLOWED" not in error
    assert stack.client.tasks.list(deployment=deployment_name + "x").items == []
    assert [t.type for t in stack.client.tasks.list(deployment=deployment_name + "o").items] == ["create"]

    # Prefect's copy of the flow run: parameters with secrets concealed, logs without the token.
    assert step.flow_run_id is not None
    [flow_run] = _prefect(stack, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [step.flow_run_id]}}})
    parameters = str(flow_run["parameters"])
    assert deployment_name in parameters
    assert SECRET_ENV not in parameters and SECRET_VALUE not in parameters
    assert "<secret: set>" in parameters
    logs = _prefect(
        stack, "/logs/filter", {"logs": {"flow_run_id": {"any_": [step.flow_run_id]}}, "limit": 200}
    )
    messages = [str(log["message"]) for log in logs]
    assert f"my token is {REDACTED}" in messages
    for message in messages:
        assert not TOKEN.search(message), message
        assert SECRET_ENV not in message and SECRET_VALUE not in message


def _server_process_env(stack: StyrminStack, namespace: str, name: str) -> dict[str, str]:
    """The environment of the running server container's process of deployment ``name``."""
    for pod in stack.kube.list(Pod, namespace=namespace):
        if not (pod.metadata and pod.metadata.name and pod.metadata.name.startswith(f"{name}-server-")):
            continue
        if pod.metadata.deletionTimestamp is not None or pod.status is None:
            continue
        for status in pod.status.containerStatuses or []:
            if status.name == "server" and status.containerID and status.state and status.state.running:
                pid = status.containerID.removeprefix("localcluster://")
                with contextlib.suppress(OSError):
                    raw = Path(f"/proc/{pid}/environ").read_bytes()
                    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    return {}


def _wait_for_server_env(stack: StyrminStack, name: str, variable: str, value: str) -> None:
    deadline = time.monotonic() + 180
    while _server_process_env(stack, name, name).get(variable) != value:
        assert time.monotonic() < deadline, f"the server's process never had {variable} set as configured"
        time.sleep(0.5)


def _secret_env_checksum(stack: StyrminStack, name: str) -> str:
    workload = stack.kube.get(Deployment, f"{name}-server", namespace=name)
    assert workload.spec is not None and workload.spec.template.metadata is not None
    checksum: str = (workload.spec.template.metadata.annotations or {})[SECRET_CHECKSUM_ANNOTATION]
    return checksum


def _server_generation(stack: StyrminStack, name: str) -> int | None:
    workload = stack.kube.get(Deployment, f"{name}-server", namespace=name)
    return workload.metadata.generation if workload.metadata is not None else None


def test_a_workload_gets_its_secret_env_from_a_kubernetes_secret_and_shows_it_nowhere_else(
    stack: StyrminStack, deployment_name: str, tmp_path: Path
) -> None:
    push_example(stack, tmp_path, "1.1.0", actions=[])
    configuration = {"env": {"server": {"API_TOKEN": SECRET_ENV, "LOG_LEVEL": "debug"}}}
    created = stack.create(
        deployment_name, driver="shop", driver_version="1.1.0", configuration=configuration
    )
    assert created.status == "succeeded", describe(created)

    _wait_for_server_env(stack, deployment_name, "API_TOKEN", SECRET_ENV)
    workload = stack.kube.get(Deployment, f"{deployment_name}-server", namespace=deployment_name)
    shown = yaml.safe_dump(workload.to_dict())
    assert SECRET_ENV not in shown and "secretKeyRef" in shown and "debug" in shown
    # The pod template's checksum of the secret env vars is keyed: no guess can be tested against it.
    checksum = _secret_env_checksum(stack, deployment_name)
    assert checksum != hashlib.sha256(json.dumps([["API_TOKEN", SECRET_ENV]]).encode()).hexdigest()[:16]
    resource = stack.kube.get(StyrminDeploymentResource, deployment_name, namespace=deployment_name)
    assert SECRET_ENV not in str(resource.to_dict())
    secret = stack.kube.get(Secret, f"{deployment_name}-styrmin-env", namespace=deployment_name)
    assert (
        secret.data is not None and base64.b64decode(secret.data["server.API_TOKEN"]).decode() == SECRET_ENV
    )

    # A new secret value reaches the process: the workload rolls out though only the Secret changed.
    rotated = {"env": {"server": {"API_TOKEN": SECRET_ENV + "-new", "LOG_LEVEL": "debug"}}}
    configured = stack.configure(deployment_name, rotated)
    assert configured.status == "succeeded", describe(configured)
    _wait_for_server_env(stack, deployment_name, "API_TOKEN", SECRET_ENV + "-new")
    rotated_checksum = _secret_env_checksum(stack, deployment_name)
    assert rotated_checksum != checksum
    # Applied again with other Helm values but the same env: the server's workload does not roll out.
    generation = _server_generation(stack, deployment_name)
    scaled = {**rotated, "values": {"taskWorker": {"replicas": 2}}}
    configured = stack.configure(deployment_name, scaled)
    assert configured.status == "succeeded", describe(configured)
    assert _secret_env_checksum(stack, deployment_name) == rotated_checksum
    assert _server_generation(stack, deployment_name) == generation
    # And a preview of the same configuration shows nothing changing, its checksum included.
    preview = stack.client.deployments.preview(deployment_name, "configure", configuration=scaled)
    assert preview.refusal is None and preview.render_error is None
    assert preview.objects and {o.change for o in preview.objects} == {"unchanged"}, preview.objects
    # Read as someone with the data dir would: Styrmin's database and Prefect's hold neither value.
    data_dir = Path(stack.cluster.data_dir).parent
    files = [*data_dir.glob("styrmin.db*"), *(p for p in (data_dir / "prefect").rglob("*") if p.is_file())]
    assert any(path.name == "styrmin.db" for path in files)
    for path in files:
        raw = path.read_bytes()
        assert SECRET_ENV.encode() not in raw, path
