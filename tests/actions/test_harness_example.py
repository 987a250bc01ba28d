"""The example test of docs/testing-drivers.md: a driver author's upgrade test of the example driver."""

from __future__ import annotations

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job

from styrmin_backend.testing import StyrminStack, describe, hook_step
from tests.support.drivers import EXAMPLE_DRIVER

pytestmark = pytest.mark.slow


def test_upgrade_stops_workers_migrates_and_starts_them_again(styrmin_stack: StyrminStack) -> None:
    stack = styrmin_stack
    stack.push_driver(EXAMPLE_DRIVER, version="9.0.0")
    created = stack.create("harness-demo", driver="shop", driver_version="9.0.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    assert hook_step(created, "setup", "post").status == "succeeded"

    task = stack.upgrade("harness-demo", app_version="2.0.0")

    assert task.status == "succeeded", describe(task)
    step = hook_step(task, "upgrade", "core")
    assert [t.type for t in step.started_tasks] == ["stop", "upgrade", "start"]
    (job,) = stack.kube.list(Job, namespace="harness-demo")
    assert job.spec is not None and job.spec.template.spec is not None
    assert job.spec.template.spec.containers[0].image == "example.com/shop/server:2.0.0"
    worker = stack.kube.get(Deployment, "harness-demo-task-worker", namespace="harness-demo")
    assert worker.status is not None and worker.status.readyReplicas == 1


def test_create_initializes_the_database_in_a_job_labelled_with_the_deployment(
    styrmin_stack: StyrminStack,
) -> None:
    stack = styrmin_stack
    stack.push_driver(EXAMPLE_DRIVER, version="9.0.0")

    created = stack.create("harness-init", driver="shop", driver_version="9.0.0", app_version="1.0.0")

    assert created.status == "succeeded", describe(created)
    assert [s.name for s in created.steps] == ["Install the application", "Run the setup post-hook"]
    (job,) = stack.kube.list(Job, namespace="harness-init", labels={"styrmin.io/deployment": "harness-init"})
    assert job.status is not None and job.status.succeeded == 1
    assert (stack.cluster.data_dir / "data" / "harness-init-harness-init.sqlite3").exists()
