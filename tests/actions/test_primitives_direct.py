"""The primitives on the real backend (SDK and lightkube), called directly against the stack's server and
local cluster. Their rules alone are tested in memory, faster, in test_in_memory.py.

No agent runs these: the test plays the action, with a context of its own and the admin's token, on
workloads it writes itself, so each rule is checked on exactly the pod template it needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Namespace
from lightkube.types import CascadeType

from styrmin_backend.actions import (
    ActionError,
    CommandFailed,
    GlobalContext,
    execute_commands,
    get_component_images,
)
from styrmin_backend.actions import _api as api_module
from styrmin_backend.actions._api import SdkApi, run_from_driver_folder
from styrmin_backend.actions.commands import (
    ACTION_JOB_LABEL,
    DEPLOYMENT_LABEL,
    OUTPUT_READ_ANNOTATION,
    TASK_LABEL,
)
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.testing import StyrminStack
from tests.support.drivers import EXAMPLE_DRIVER

from .conftest import push_example

pytestmark = pytest.mark.slow
DRIVER_VERSION = "1.0.1"


@pytest.fixture(scope="module")
def driver(stack: StyrminStack, tmp_path_factory: pytest.TempPathFactory) -> None:
    push_example(stack, tmp_path_factory.mktemp("driver"), DRIVER_VERSION)


@pytest.fixture
def as_action(stack: StyrminStack, driver: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment the agent gives an action: the API token and URL, and the kubeconfig."""
    assert stack.client.token is not None
    monkeypatch.setenv("STYRMIN_TOKEN", stack.client.token)
    monkeypatch.setenv("STYRMIN_URL", stack.url)
    monkeypatch.setenv("KUBECONFIG", str(stack.cluster.kubeconfig_path))
    yield


def context(
    name: str, url: str, configuration: dict[str, Any] | None = None, target: str = "2.1.0"
) -> GlobalContext:
    return GlobalContext(
        deployment_id=1,
        deployment_name=name,
        namespace=name,
        cluster_id="local",
        driver_name="shop",
        driver_version=DRIVER_VERSION,
        current_app_version="1.0.0",
        target_app_version=target,
        configuration=DeploymentConfiguration.model_validate(configuration or {}),
        revision=2,
        task_id=424242,
        hook_step_id=434343,
        hook="upgrade",
        mode="core",
        api_url=url,
    )


def write_server_workload(stack: StyrminStack, name: str, pod_spec: dict[str, Any]) -> None:
    """The server component's workload as the chart would have rendered it, without running pods."""
    stack.kube.apply(
        Namespace.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    )
    labels = {"app": f"{name}-server"}
    stack.kube.apply(
        Deployment.from_dict(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"{name}-server", "namespace": name},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                },
            }
        )
    )


SIDECARS_AND_INIT = {
    "initContainers": [{"name": "wait-db", "image": "example.com/shop/init:1.0.0"}],
    "containers": [
        {"name": "log-shipper", "image": "example.com/shop/log-shipper:1.0.0"},
        {"name": "server", "image": "registry.local:5000/shop/server:1.0.0@sha256:" + "cd" * 32},
        {"name": "metrics", "image": "example.com/metrics:3"},
    ],
}


async def test_images_are_the_regular_containers_component_container_first_then_pod_order(
    stack: StyrminStack, as_action: None, deployment_name: str
) -> None:
    write_server_workload(stack, deployment_name, SIDECARS_AND_INIT)
    images = await get_component_images(component="server", context=context(deployment_name, stack.url))
    assert images == [
        "registry.local:5000/shop/server:1.0.0@sha256:" + "cd" * 32,
        "example.com/shop/log-shipper:1.0.0",
        "example.com/metrics:3",
    ]


async def test_an_override_in_the_new_configuration_is_first_with_the_target_version_before_the_workload_has_it(
    stack: StyrminStack, as_action: None, deployment_name: str
) -> None:
    write_server_workload(stack, deployment_name, SIDECARS_AND_INIT)
    configuration = {"images": {"server": "registry.local:5000/shop/server:{{ app.version }}-debug"}}
    images = await get_component_images(
        component="server", context=context(deployment_name, stack.url, configuration, target="2.1.0")
    )
    assert images == [
        "registry.local:5000/shop/server:2.1.0-debug",
        "example.com/shop/log-shipper:1.0.0",
        "example.com/metrics:3",
    ]


async def test_env_from_component_copies_the_workload_env_with_the_new_configuration_on_top(
    stack: StyrminStack, as_action: None, deployment_name: str
) -> None:
    server = {
        "name": "server",
        "image": "example.com/shop/server:1.0.0",
        "env": [
            {"name": "REMOVED_BY_NEW_CONFIGURATION", "value": "still-copied"},
            {"name": "CHANGED", "value": "old"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    }
    write_server_workload(stack, deployment_name, {"containers": [server]})
    configuration = {"env": {"server": {"CHANGED": "new", "ADDED": "yes"}}}
    result = await execute_commands(
        ["sh", "-c", 'echo "$REMOVED_BY_NEW_CONFIGURATION $CHANGED $ADDED $EXTRA ${POD%%-*}"'],
        image="example.com/shop/server:1.0.0",
        context=context(deployment_name, stack.url, configuration),
        env_from_component="server",
        env={"EXTRA": "given"},
    )
    assert (result.exit_code, result.output_tail, result.output_truncated) == (
        0,
        f"still-copied new yes given {deployment_name}\n",
        False,
    )
    job = stack.kube.get(Job, result.job_name, namespace=deployment_name)
    assert job.metadata is not None and job.metadata.labels is not None
    assert job.metadata.labels[DEPLOYMENT_LABEL] == deployment_name
    # Read by its action: the next action may delete it even within the same change.
    assert (job.metadata.annotations or {}).get(OUTPUT_READ_ANNOTATION) == "true"
    assert result.job_name.startswith(f"{deployment_name}-")


async def test_a_job_still_running_from_another_change_fails_the_action_saying_to_wait(
    stack: StyrminStack, as_action: None, deployment_name: str
) -> None:
    write_server_workload(stack, deployment_name, {"containers": [{"name": "server", "image": "x:1"}]})
    running = f"{deployment_name}-migrate-0000"
    labels = {DEPLOYMENT_LABEL: deployment_name, ACTION_JOB_LABEL: "true", TASK_LABEL: "7"}
    stack.kube.create(
        Job.from_dict(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": running, "namespace": deployment_name, "labels": labels},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "command",
                                    "image": "example.com/shop/server:1.0.0",
                                    "command": ["sleep", "60"],
                                }
                            ],
                        }
                    },
                },
            }
        )
    )
    try:
        with pytest.raises(ActionError) as raised:
            await execute_commands(
                ["true"], image="example.com/shop/server:1.0.0", context=context(deployment_name, stack.url)
            )
        assert str(raised.value) == (
            f'Job {running} of an earlier action of deployment "{deployment_name}" is still running (task 7). '
            "Wait for it to end, then request the change again."
        )
        jobs = [j.metadata.name for j in stack.kube.list(Job, namespace=deployment_name) if j.metadata]
        assert jobs == [running]  # no Job of its own was started
    finally:
        stack.kube.delete(Job, running, namespace=deployment_name, cascade=CascadeType.BACKGROUND)


async def test_a_failing_command_raises_naming_the_job_and_its_exit_code(
    stack: StyrminStack, as_action: None, deployment_name: str
) -> None:
    write_server_workload(stack, deployment_name, {"containers": [{"name": "server", "image": "x:1"}]})
    with pytest.raises(CommandFailed) as raised:
        await execute_commands(
            "echo starting; echo 'disk full' >&2; exit 4",
            image="example.com/shop/server:1.0.0",
            context=context(deployment_name, stack.url),
        )
    failed = raised.value
    assert (failed.exit_code, failed.output_tail, failed.output_truncated) == (
        4,
        "starting\ndisk full\n",
        False,
    )
    assert str(failed).startswith(f"Job {failed.job_name} failed: its command ")
    assert "exited with code 4. Its last line: disk full" in str(failed)
    # Outside a reconciliation (the admin's token here) the output cannot be stored, and the error says so.
    assert "Its output could not be stored on the hook step" in str(failed)


async def test_a_command_past_its_timeout_is_stopped_and_the_error_says_so(
    stack: StyrminStack, as_action: None, deployment_name: str
) -> None:
    write_server_workload(stack, deployment_name, {"containers": [{"name": "server", "image": "x:1"}]})
    with pytest.raises(
        CommandFailed, match=r"did not end within 1 seconds, the timeout of its command 'sleep 60'"
    ):
        await execute_commands(
            ["sleep", "60"],
            image="example.com/shop/server:1.0.0",
            context=context(deployment_name, stack.url),
            timeout=1,
        )


async def test_an_action_reads_its_own_drivers_spec_from_its_folder_and_any_other_from_the_api(
    stack: StyrminStack, driver: None, as_action: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent runs an action from its driver's unpacked folder: the spec of that driver version is
    read there, one request less; another version's comes from the API, as the registry has it."""
    monkeypatch.setattr(api_module, "_own_driver", [])
    monkeypatch.setattr(api_module, "_specs", {})
    run_from_driver_folder(EXAMPLE_DRIVER)  # the example at 1.0.0
    own = await SdkApi("http://127.0.0.1:9").driver_spec("shop", "1.0.0")  # nothing listens there
    assert (own.metadata.version, [c.name for c in own.spec.components]) == (
        "1.0.0",
        ["server", "task-worker"],
    )
    other = await SdkApi(stack.url).driver_spec("shop", DRIVER_VERSION)
    assert other.metadata.version == DRIVER_VERSION
