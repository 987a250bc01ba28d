"""The styrmin-actions token of one reconciliation acts only on its own deployment and task."""

from __future__ import annotations

from pathlib import Path

import pytest

from styrmin_backend.drivers import pack_driver_folder
from tests.support.drivers import driver_folder

from .conftest import ADMIN_PASSWORD, Stack

SHOP = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
OTHER = {"name": "other", "namespace": "other", "driver": "shop", "driver_version": "1.0.0"}
REFUSAL = 'This token belongs to the actions of deployment "shop" (task {task}); it cannot '


@pytest.fixture
def shop_actions(stack: Stack) -> tuple[int, dict[str, str]]:
    """Deployments "shop" and "other"; the actions token of the task that created "shop"."""
    stack.add_driver()
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    task = stack.client.post("/api/v1/deployments", json=SHOP, headers=admin).json()["task"]["id"]
    stack.client.post("/api/v1/deployments", json=OTHER, headers=admin)
    return task, stack.headers(stack.actions_token(task_id=task)[1])


def test_actions_token_acts_on_its_own_deployment(
    stack: Stack, shop_actions: tuple[int, dict[str, str]]
) -> None:
    task, headers = shop_actions
    assert stack.client.get("/api/v1/deployments/shop", headers=headers).status_code == 200
    stop = stack.client.post(
        "/api/v1/deployments/shop/stop", json={"components": ["task-worker"]}, headers=headers
    )
    assert stop.status_code == 202, stop.text
    stop_task = stop.json()["task"]["id"]
    assert stack.client.get(f"/api/v1/tasks/{stop_task}", headers=headers).status_code == 200
    assert stack.client.get("/api/v1/tasks?deployment=shop", headers=headers).status_code == 200
    assert stack.client.get("/api/v1/drivers/shop/versions/1.0.0", headers=headers).status_code == 200
    assert stack.client.get(f"/api/v1/tasks/{task}/configuration", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "cannot"),
    [
        (
            "POST",
            "/api/v1/deployments/other/stop",
            {"components": ["task-worker"]},
            'act on deployment "other"',
        ),
        ("POST", "/api/v1/deployments/other/upgrade", {"app_version": "2.0"}, 'act on deployment "other"'),
        ("GET", "/api/v1/deployments/other", None, 'act on deployment "other"'),
        ("PUT", "/api/v1/deployments/other/configuration", {"values": {}}, 'act on deployment "other"'),
        ("POST", "/api/v1/deployments", {**OTHER, "name": "third"}, "call POST /api/v1/deployments"),
        ("DELETE", "/api/v1/deployments/shop", None, "call DELETE /api/v1/deployments/shop"),
        ("GET", "/api/v1/deployments", None, "call GET /api/v1/deployments"),
        ("GET", "/api/v1/tasks", None, "list tasks beyond its deployment"),
        ("GET", "/api/v1/users", None, "call GET /api/v1/users"),
        ("POST", "/api/v1/auth/tokens", {"name": "mine"}, "call POST /api/v1/auth/tokens"),
    ],
)
def test_actions_token_is_refused_beyond_its_deployment_and_told_why(
    stack: Stack,
    shop_actions: tuple[int, dict[str, str]],
    method: str,
    path: str,
    body: dict[str, object] | None,
    cannot: str,
) -> None:
    task, headers = shop_actions
    before = stack.client.get("/api/v1/tasks", headers=stack.headers(stack.token_for("admin"))).json()[
        "items"
    ]
    response = stack.client.request(method, path, json=body, headers=headers)
    assert response.status_code == 403
    assert response.json()["message"].startswith(REFUSAL.format(task=task) + cannot)
    after = stack.client.get("/api/v1/tasks", headers=stack.headers(stack.token_for("admin"))).json()["items"]
    assert after == before, "a refused call changes nothing"


def test_actions_token_cannot_push_a_driver(
    stack: Stack, shop_actions: tuple[int, dict[str, str]], tmp_path: Path
) -> None:
    task, headers = shop_actions
    archive = pack_driver_folder(driver_folder(tmp_path / "shop", version="9.0.0"))
    response = stack.client.post(
        "/api/v1/drivers", content=archive, headers={**headers, "Content-Type": "application/gzip"}
    )
    assert response.status_code == 403
    assert response.json()["message"].startswith(REFUSAL.format(task=task) + "call POST /api/v1/drivers")


def test_actions_token_cannot_read_tasks_of_other_deployments(
    stack: Stack, shop_actions: tuple[int, dict[str, str]]
) -> None:
    task, headers = shop_actions
    other_task = task + 1  # the create task of "other"
    response = stack.client.get(f"/api/v1/tasks/{other_task}", headers=headers)
    assert response.status_code == 403
    assert f"read task {other_task}, which is not of its deployment" in response.json()["message"]
    refused = stack.client.get(f"/api/v1/tasks/{other_task}/configuration", headers=headers)
    assert refused.status_code == 403


def test_actions_token_links_changes_only_to_steps_of_its_own_task(
    stack: Stack, shop_actions: tuple[int, dict[str, str]]
) -> None:
    from styrmin_backend.services import workflow

    _, headers = shop_actions
    admin = stack.headers(stack.token_for("admin"))
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0"}, headers=admin
    )
    with stack.session() as session:
        foreign_step = workflow.add_step(session, upgrade.json()["task"]["id"], "Run the upgrade hook").id
    response = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": foreign_step},
        headers=headers,
    )
    assert response.status_code == 403
    assert "actions link changes only to the steps of their own task" in response.json()["message"]


def test_actions_token_in_a_session_cookie_is_refused(
    stack: Stack, shop_actions: tuple[int, dict[str, str]]
) -> None:
    _, headers = shop_actions
    token = headers["Authorization"].removeprefix("Bearer ")
    stack.client.cookies.set("styrmin_session", token)
    assert stack.client.get("/api/v1/deployments/other").status_code == 401
    assert stack.client.get("/deployments/other", follow_redirects=False).status_code in (303, 401)
