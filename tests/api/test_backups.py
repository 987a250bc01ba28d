"""Backups through the API: taken only when the driver can, recorded from the agent's report, and
restores refused, changing nothing, for a backup that cannot bring the deployment back."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import DriverReport, read_driver
from styrmin_backend.services import drivers, workflow
from tests.support.drivers import driver_folder

from .conftest import Stack

FILES = [{"name": "shop.sqlite3", "size": 8192, "sha256": "ab" * 32}]


def _push(stack: Stack, *, name: str = "shop", version: str = "1.0.0", with_actions: bool = True) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = driver_folder(Path(scratch) / name, version=version, with_actions=with_actions)
        spec_file = folder / "driver.styrmin.yml"
        spec = yaml.safe_load(spec_file.read_text())
        spec["metadata"]["name"] = name
        spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
        package = read_driver(folder)
    with stack.session() as session:
        drivers.push_driver(session, package, DriverReport(), pushed_by="admin")


def _admin(stack: Stack) -> dict[str, str]:
    return stack.headers(stack.token_for("admin"))


def _deploy(stack: Stack, name: str = "shop", driver: str = "shop") -> None:
    body = {"name": name, "namespace": name, "driver": driver, "driver_version": "1.0.0"}
    response = stack.client.post("/api/v1/deployments", json=body, headers=_admin(stack))
    assert response.status_code == 202, response.text


def _agent(stack: Stack) -> dict[str, str]:
    response = stack.client.post(
        "/api/v1/agents", json={"name": "local-agent", "cluster": "local"}, headers=_admin(stack)
    )
    assert response.status_code == 201, response.text
    return stack.headers(response.json()["key"])


def _run_next(stack: Stack, agent: dict[str, str], *, error: str | None = None, result: Any = None) -> Any:
    """Claim the next task and end it as the agent would."""
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    assert claim.status_code == 200, claim.text
    body = claim.json()
    ended = stack.client.post(
        f"/api/v1/agent/tasks/{body['task']['id']}/end",
        json={"error": error, "result": result},
        headers=agent,
    )
    assert ended.status_code == 200, ended.text
    return body


def _deployed_shop(stack: Stack) -> dict[str, str]:
    """Deployment "shop" of a driver with backup actions, its create task run by the agent; the agent's headers."""
    _push(stack)
    _deploy(stack)
    agent = _agent(stack)
    _run_next(stack, agent, result={"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}})
    return agent


def _backup(stack: Stack, agent: dict[str, str], deployment: str = "shop", **end: Any) -> dict[str, Any]:
    taken = stack.client.post(f"/api/v1/deployments/{deployment}/backups", json={}, headers=_admin(stack))
    assert taken.status_code == 202, taken.text
    claim = _run_next(stack, agent, **end)
    assert claim["change_type"] == "backup" and claim["change"]["backup_id"] == taken.json()["backup"]["id"]
    backup: dict[str, Any] = stack.client.get(
        f"/api/v1/backups/{taken.json()['backup']['id']}", headers=_admin(stack)
    ).json()
    return backup


def test_a_driver_without_a_backup_action_cannot_be_backed_up_and_nothing_is_recorded(stack: Stack) -> None:
    _push(stack, with_actions=False)
    _deploy(stack)
    before = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()
    response = stack.client.post("/api/v1/deployments/shop/backups", json={}, headers=_admin(stack))
    assert response.status_code == 409
    assert response.json()["message"].startswith(
        'Deployment "shop" cannot be backed up: its driver shop@1.0.0 declares no action for the backup hook.'
    )
    after = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()
    assert after["revision"] == before["revision"]
    assert stack.client.get("/api/v1/deployments/shop/backups", headers=_admin(stack)).json() == []


def test_a_backup_is_a_task_and_its_row_records_what_the_agent_found(stack: Stack) -> None:
    agent = _deployed_shop(stack)
    result = {"backup": {"location": "folder /srv/backups", "files": FILES}}
    backup = _backup(stack, agent, result=result)
    assert backup["status"] == "succeeded" and backup["label"] == "manual"
    assert (backup["app_version"], backup["driver_version"], backup["driver"]) == ("1.0.0", "1.0.0", "shop")
    assert backup["files"] == FILES and backup["location"] == "folder /srv/backups"
    assert backup["key"] == f"shop/backup-{backup['id']}" and backup["requested_by"] == "admin"
    assert backup["ended_at"] is not None and backup["revision"] == 2
    task = stack.client.get(f"/api/v1/tasks/{backup['task_id']}", headers=_admin(stack)).json()
    assert (task["type"], task["status"]) == ("backup", "succeeded")


def test_every_signed_in_user_reads_backups_and_only_read_write_takes_or_restores_them(stack: Stack) -> None:
    agent = _deployed_shop(stack)
    backup = _backup(stack, agent, result={"backup": {"location": "folder /x", "files": FILES}})
    reader = stack.headers(stack.make_user("reader", Role.READ_ONLY))
    assert [b["id"] for b in stack.client.get("/api/v1/deployments/shop/backups", headers=reader).json()] == [
        backup["id"]
    ]
    assert stack.client.get(f"/api/v1/backups/{backup['id']}", headers=reader).status_code == 200
    assert stack.client.post("/api/v1/deployments/shop/backups", json={}, headers=reader).status_code == 403
    refused = stack.client.post(
        "/api/v1/deployments/shop/restore", json={"backup_id": backup["id"]}, headers=reader
    )
    assert refused.status_code == 403
    writer = stack.headers(stack.make_user("writer", Role.READ_WRITE))
    restored = stack.client.post(
        "/api/v1/deployments/shop/restore", json={"backup_id": backup["id"]}, headers=writer
    )
    assert restored.status_code == 202, restored.text
    assert restored.json()["task"]["type"] == "restore"


def test_restores_that_cannot_bring_the_deployment_back_are_refused_with_nothing_changed(
    stack: Stack,
) -> None:
    _push(stack)
    _push(stack, name="bakery")
    _deploy(stack)
    _deploy(stack, name="cakes", driver="bakery")
    agent = _agent(stack)
    applied = {"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}}
    _run_next(stack, agent, result=applied)
    _run_next(stack, agent, result=applied)
    failed = _backup(stack, agent, error="Action back_up_database failed: disk full")
    empty = _backup(stack, agent, result={"backup": {"location": "folder /x", "files": []}})
    other = _backup(
        stack, agent, deployment="cakes", result={"backup": {"location": "folder /x", "files": FILES}}
    )
    assert failed["status"] == "failed" and failed["error"] == "Action back_up_database failed: disk full"
    before = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()
    cases = {
        failed[
            "id"
        ]: f"Backup {failed['id']} is failed, not succeeded: only a complete backup can be restored.",
        empty["id"]: f"Backup {empty['id']} recorded no files: there is nothing to restore.",
        other[
            "id"
        ]: f'Backup {other["id"]} was taken by driver bakery, and deployment "shop" runs driver shop',
        999: "There is no backup 999.",
    }
    for backup_id, message in cases.items():
        response = stack.client.post(
            "/api/v1/deployments/shop/restore", json={"backup_id": backup_id}, headers=_admin(stack)
        )
        assert response.status_code in (409, 422), response.text
        assert response.json()["message"].startswith(message), response.json()
        assert response.json()["field"] == "backup_id"
    after = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()
    assert (after["revision"], after["status"]) == (before["revision"], before["status"])
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 204


def test_a_backup_of_another_deployment_is_restored_only_when_the_request_names_that_deployment(
    stack: Stack,
) -> None:
    # Taken before without a word: one mistyped id replaced a deployment's data, configuration and
    # secrets with another deployment's.
    agent = _deployed_shop(stack)
    _deploy(stack, name="shop-2")
    _run_next(stack, agent, result={"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}})
    backup = _backup(stack, agent, result={"backup": {"location": "folder /srv", "files": FILES}})
    before = stack.client.get("/api/v1/deployments/shop-2", headers=_admin(stack)).json()

    for sent in ({}, {"from_deployment": "shop-2"}, {"from_deployment": "other"}):
        refused = stack.client.post(
            "/api/v1/deployments/shop-2/restore",
            json={"backup_id": backup["id"], **sent},
            headers=_admin(stack),
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["field"] == "backup_id"
        assert refused.json()["message"].startswith(
            f'Backup {backup["id"]} is a backup of deployment "shop", not of "shop-2": restoring it would '
            'replace the data, configuration and secrets of "shop-2" with those of "shop".'
        )
        assert "--from-deployment shop" in refused.json()["message"]
    assert stack.client.get("/api/v1/deployments/shop-2", headers=_admin(stack)).json() == before

    restored = stack.client.post(
        "/api/v1/deployments/shop-2/restore",
        json={"backup_id": backup["id"], "from_deployment": "shop"},
        headers=_admin(stack),
    )
    assert restored.status_code == 202, restored.text
    assert restored.json()["task"]["type"] == "restore"


def test_deleting_a_backup_is_a_task_and_the_backup_goes_once_its_files_are_deleted(stack: Stack) -> None:
    agent = _deployed_shop(stack)
    backup = _backup(stack, agent, result={"backup": {"location": "folder /srv", "files": FILES}})
    reader = stack.headers(stack.make_user("reader", Role.READ_ONLY))
    assert stack.client.delete(f"/api/v1/backups/{backup['id']}", headers=reader).status_code == 403

    deleting = stack.client.delete(f"/api/v1/backups/{backup['id']}", headers=_admin(stack))

    assert deleting.status_code == 202, deleting.text
    assert deleting.json()["task"]["type"] == "delete-backup"
    again = stack.client.delete(f"/api/v1/backups/{backup['id']}", headers=_admin(stack))
    assert (again.status_code, again.json()["message"]) == (
        409,
        f"Backup {backup['id']} is already being deleted.",
    )
    claim = _run_next(stack, agent)
    assert (claim["change"]["key"], claim["change"]["location"]) == (backup["key"], None)
    assert stack.client.get(f"/api/v1/backups/{backup['id']}", headers=_admin(stack)).status_code == 404
    assert stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()["status"] == "running"


def test_a_failed_deletion_leaves_the_backup_as_it_was_and_says_why(stack: Stack) -> None:
    agent = _deployed_shop(stack)
    backup = _backup(stack, agent, result={"backup": {"location": "folder /srv", "files": FILES}})
    stack.client.delete(f"/api/v1/backups/{backup['id']}", headers=_admin(stack))

    _run_next(stack, agent, error="Could not delete objects under s3://b/shop/backup-2: AccessDenied")

    after = stack.client.get(f"/api/v1/backups/{backup['id']}", headers=_admin(stack)).json()
    assert after["status"] == "succeeded"
    assert after["error"].endswith("AccessDenied")
    assert stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()["status"] == "running"


def test_a_backup_still_being_taken_cannot_be_deleted(stack: Stack) -> None:
    _push(stack)
    _deploy(stack)
    taken = stack.client.post("/api/v1/deployments/shop/backups", json={}, headers=_admin(stack)).json()

    refused = stack.client.delete(f"/api/v1/backups/{taken['backup']['id']}", headers=_admin(stack))

    assert refused.status_code == 409
    assert refused.json()["message"].startswith(
        f"Backup {taken['backup']['id']} is still being taken (pending)"
    )


def test_an_action_asking_again_for_the_backup_its_step_started_gets_that_backup_while_it_is_taken(
    stack: Stack,
) -> None:
    agent = _deployed_shop(stack)
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "1.1.0"}, headers=_admin(stack)
    ).json()["task"]["id"]
    with stack.session() as session:
        workflow.start_task(session, upgrade)
        step_id = workflow.add_step(session, upgrade, hook_step_name(Hook.UPGRADE, Mode.PRE)).id
    _, token = stack.actions_token(task_id=upgrade)

    def ask() -> tuple[int, int]:
        taken = stack.client.post(
            "/api/v1/deployments/shop/backups",
            json={"started_by_step": step_id},
            headers=stack.headers(token),
        )
        assert taken.status_code == 202, taken.text
        return taken.json()["task"]["id"], taken.json()["backup"]["id"]

    first = ask()
    assert ask() == first
    listed = stack.client.get("/api/v1/deployments/shop/backups", headers=_admin(stack)).json()
    assert [b["id"] for b in listed] == [first[1]]
    claim = _run_next(stack, agent, result={"backup": {"location": "folder /srv/backups", "files": FILES}})
    assert claim["task"]["id"] == first[0]
    # Taken: asking again takes another.
    again = ask()
    assert again[0] != first[0] and again[1] != first[1]
