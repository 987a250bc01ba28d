"""The seed's example upgrade action, unchanged, against the example driver on the whole stack."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job

from styrmin_backend.actions.commands import ACTION_JOB_LABEL, DEPLOYMENT_LABEL
from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.testing import StyrminStack, describe, hook_step

from .conftest import push_example

pytestmark = pytest.mark.slow
DIGEST = "sha256:" + "ab" * 32


def database(stack: StyrminStack, name: str) -> Path:
    return stack.cluster.data_dir / "data" / f"{name}-{name}.sqlite3"


def action_jobs(stack: StyrminStack, name: str) -> list[Job]:
    return list(
        stack.kube.list(Job, namespace=name, labels={DEPLOYMENT_LABEL: name, ACTION_JOB_LABEL: "true"})
    )


@pytest.mark.parametrize(
    ("configuration", "server_image"),
    [
        pytest.param({}, "example.com/shop/server:2.0.0", id="chart-image"),
        pytest.param(
            {"values": {"server": {"image": {"repository": "registry.local:5000/shop/server"}}}},
            "registry.local:5000/shop/server:2.0.0",
            id="registry-port",
        ),
        pytest.param(
            {"values": {"server": {"image": {"tag": f"1.0.0@{DIGEST}"}}}},
            "example.com/shop/server:2.0.0",
            id="digest",
        ),
        pytest.param(
            {"images": {"server": "registry.local:5000/shop/server:{{ app.version }}"}},
            "registry.local:5000/shop/server:2.0.0",
            id="override",
        ),
    ],
)
def test_seed_upgrade_action_stops_upgrades_migrates_at_the_target_and_starts(
    stack: StyrminStack,
    deployment_name: str,
    tmp_path: Path,
    configuration: dict[str, object],
    server_image: str,
) -> None:
    push_example(stack, tmp_path, "1.0.0")
    name = deployment_name
    created = stack.create(
        name, driver="shop", driver_version="1.0.0", app_version="1.0.0", configuration=configuration
    )
    assert created.status == "succeeded", describe(created)
    with sqlite3.connect(database(stack, name)) as db:
        assert db.execute("SELECT version FROM schema").fetchone() == ("1.0.0",)

    task = stack.upgrade(name, app_version="2.0.0")

    assert task.status == "succeeded", describe(task)
    step = hook_step(task, Hook.UPGRADE, Mode.CORE)
    assert [(t.type.value, t.status.value) for t in step.started_tasks] == [
        ("stop", "succeeded"),
        ("upgrade", "succeeded"),
        ("start", "succeeded"),
    ], describe(task)
    # The setup post-hook's Job was left for kubectl; the upgrade's Job replaced it, saying so.
    assert any(note.startswith("Deleted Job ") for note in step.notes), describe(task)
    started = [stack.client.tasks.get(t.id) for t in step.started_tasks]
    assert all(t.started_by is not None and t.started_by.task_type == "upgrade" for t in started)
    assert all(t.started_by is not None and t.started_by.step_id == step.id for t in started)
    assert task.result is not None
    assert [(c["task_id"], c["status"]) for c in task.result["started_tasks"]] == [
        (t.id, "succeeded") for t in step.started_tasks
    ], task.result

    jobs = action_jobs(stack, name)
    assert len(jobs) == 1
    container = jobs[0].spec.template.spec.containers[0]
    assert (container.image, container.command) == (server_image, ["shop", "migrate"])
    assert {"SHOP_DATABASE", "SHOP_VERSION"} <= {e.name for e in container.env or []}
    with sqlite3.connect(database(stack, name)) as db:
        assert db.execute("SELECT version FROM schema").fetchone() == ("2.0.0",)
        assert db.execute("SELECT from_version, to_version FROM migrations ORDER BY rowid").fetchall()[
            -1
        ] == (
            "1.0.0",
            "2.0.0",
        )
    worker = stack.kube.get(Deployment, f"{name}-task-worker", namespace=name)
    assert worker.spec is not None and worker.spec.replicas == 1
    shown = stack.client.deployments.get(name)
    assert shown.status == "running"
