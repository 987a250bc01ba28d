"""A requested change is stored, claimed and retried as one typed shape; rows of earlier versions still load."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from styrmin_backend.domain.backups import CHECK_FILES_STEP, restore_version_step
from styrmin_backend.domain.plan import decide
from styrmin_backend.domain.steps import STOP_STEP
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.services.change_models import (
    RequestedDeleteBackup,
    RequestedRestore,
    RequestedStop,
    RequestedUpgrade,
    change_facts_of,
    requested_change,
    stored_result,
)
from styrmin_backend.store.models import ChangeRow, TaskRow

from .conftest import Stack

CONFIGURATION = {"values": {"replicas": 2}, "images": {}, "env": {}}
FILE = {"name": "db.sqlite", "size": 4, "sha256": "a" * 64}

EARLIER_ROWS: list[tuple[TaskType, dict[str, Any]]] = [
    (TaskType.CREATE, {"driver_version": "1.0.0", "app_version": "1.0.0", "configuration": CONFIGURATION}),
    (
        TaskType.UPGRADE,
        {
            "from_app_version": "1.0.0",
            "to_app_version": "2.0.0",
            "from_driver_version": "1.0.0",
            "to_driver_version": "1.1.0",
            "configuration": CONFIGURATION,
            "run_hooks": True,
        },
    ),
    (TaskType.CONFIGURE, {"configuration": CONFIGURATION}),
    (TaskType.STOP, {"components": ["task-worker"]}),
    (TaskType.START, {"components": ["task-worker"]}),
    (TaskType.DELETE, {}),
    (
        TaskType.BACKUP,
        {
            "backup_id": 4,
            "key": "shop-4",
            "driver_version": "1.0.0",
            "app_version": "1.0.0",
            "location": None,
        },
    ),
    (
        TaskType.RESTORE,
        {
            "backup_id": 4,
            "key": "shop-4",
            "location": None,
            "files": [FILE],
            "driver_version": "1.0.0",
            "app_version": "1.0.0",
            "from_app_version": "2.0.0",
            "from_driver_version": "1.0.0",
            "configuration": CONFIGURATION,
            "restores_configuration": True,
        },
    ),
    (
        TaskType.DELETE_BACKUP,
        {"backup_id": 4, "key": "shop-4", "location": None, "status_before": "succeeded"},
    ),
]
"""Each kind's spec exactly as earlier versions stored it."""


@pytest.mark.parametrize(("kind", "spec"), EARLIER_ROWS, ids=[kind.value for kind, _ in EARLIER_ROWS])
def test_a_change_stored_by_an_earlier_version_loads_typed_and_is_stored_again_unchanged(
    kind: TaskType, spec: dict[str, Any]
) -> None:
    requested = requested_change(kind, spec)
    assert requested.type is kind
    assert requested.stored() == spec  # earlier servers read the rows this one writes


def test_an_earlier_upgrade_rows_to_versions_are_the_upgrades_target() -> None:
    upgrade = requested_change("upgrade", dict(EARLIER_ROWS[1][1]))
    assert isinstance(upgrade, RequestedUpgrade)
    assert (upgrade.app_version, upgrade.driver_version) == ("2.0.0", "1.1.0")
    assert (upgrade.from_app_version, upgrade.run_hooks) == ("1.0.0", True)


def test_an_upgrade_row_without_run_hooks_runs_its_hooks() -> None:
    spec = {k: v for k, v in EARLIER_ROWS[1][1].items() if k != "run_hooks"}
    upgrade = requested_change(TaskType.UPGRADE, spec)
    assert isinstance(upgrade, RequestedUpgrade) and upgrade.run_hooks


def test_stop_and_start_are_told_apart_by_the_rows_kind_alone() -> None:
    assert isinstance(requested_change("stop", {"components": ["a"]}), RequestedStop)
    assert not isinstance(requested_change("start", {"components": ["a"]}), RequestedStop)


def test_restore_and_backup_deletion_rows_load_their_backup() -> None:
    restore = requested_change(TaskType.RESTORE, EARLIER_ROWS[7][1])
    assert isinstance(restore, RequestedRestore)
    assert (restore.backup_id, restore.files[0].name, restore.restores_configuration) == (
        4,
        "db.sqlite",
        True,
    )
    deletion = requested_change(TaskType.DELETE_BACKUP, EARLIER_ROWS[8][1])
    assert isinstance(deletion, RequestedDeleteBackup) and deletion.status_before == "succeeded"


def test_a_stored_task_result_reads_its_parts_and_the_tasks_its_steps_started() -> None:
    result = stored_result(
        {
            "applied": {"app_version": "2.0.0", "driver_version": "1.0.0"},
            "backup": {"location": "/backups", "files": [FILE]},
            "started_tasks": [
                {"task_id": 9, "type": "stop", "status": "succeeded", "step": "Run the upgrade hook"}
            ],
        }
    )
    assert result.applied is not None and result.applied.app_version == "2.0.0"
    assert result.backup is not None and result.backup.files[0].sha256 == "a" * 64
    assert [t.task_id for t in result.started_tasks] == [9]
    assert stored_result(None).applied is None


def test_a_stored_change_gives_the_plan_its_task_will_record() -> None:
    upgrade = decide(change_facts_of(requested_change("upgrade", EARLIER_ROWS[1][1])), [])
    assert upgrade.step_names == ["Run the upgrade hook"]
    stop = decide(change_facts_of(requested_change("stop", EARLIER_ROWS[3][1])), [])
    assert [(s.name, s.components) for s in stop] == [(STOP_STEP, ("task-worker",))]
    restore = decide(change_facts_of(requested_change("restore", EARLIER_ROWS[7][1])), [])
    assert restore.step_names == [CHECK_FILES_STEP, restore_version_step("1.0.0")]


def _agent(stack: Stack) -> dict[str, str]:
    admin = stack.headers(stack.token_for("admin"))
    response = stack.client.post("/api/v1/agents", json={"name": "agent", "cluster": "local"}, headers=admin)
    return stack.headers(response.json()["key"])


def test_an_upgrade_stored_by_an_earlier_version_is_claimed_and_retried_at_its_target(stack: Stack) -> None:
    stack.add_driver()
    stack.add_driver("1.1.0")
    admin = stack.headers(stack.token_for("admin"))
    body = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
    assert stack.client.post("/api/v1/deployments", json=body, headers=admin).status_code == 202
    agent = _agent(stack)
    create = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    ended = {"result": {"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}}}
    stack.client.post(f"/api/v1/agent/tasks/{create['task']['id']}/end", json=ended, headers=agent)
    response = stack.client.post(
        "/api/v1/deployments/shop/upgrade",
        json={"app_version": "2.0.0", "driver_version": "1.1.0"},
        headers=admin,
    )
    upgrade_id = response.json()["task"]["id"]
    with stack.session() as session:  # as an earlier version wrote it: no run_hooks, the stored key names
        task = session.get(TaskRow, upgrade_id)
        change = session.get(ChangeRow, task.change_id)
        assert change.spec["to_app_version"] == "2.0.0"  # the key names stay as they were
        change.spec = {
            "from_app_version": "1.0.0",
            "to_app_version": "2.0.0",
            "from_driver_version": "1.0.0",
            "to_driver_version": "1.1.0",
            "configuration": change.spec["configuration"],
        }
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claim["change"]["type"] == "upgrade" and claim["change"]["run_hooks"] is True
    assert (claim["change"]["target"]["app_version"], claim["change"]["target"]["driver_version"]) == (
        "2.0.0",
        "1.1.0",
    )
    assert claim["change"]["from_app_version"] == "1.0.0"
    failed = {"error": "Run the upgrade hook failed"}
    stack.client.post(f"/api/v1/agent/tasks/{upgrade_id}/end", json=failed, headers=agent)
    retried = stack.client.post(f"/api/v1/tasks/{upgrade_id}/retry", headers=admin)
    assert retried.status_code == 202, retried.text
    with stack.session() as session:
        again = session.scalars(select(ChangeRow).order_by(ChangeRow.id.desc())).first()
        assert again is not None and again.type == "upgrade"
        assert (again.spec["to_app_version"], again.spec["to_driver_version"]) == ("2.0.0", "1.1.0")
