"""Changes record a revision and a pending task; tasks read back with steps, output and links."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, func, select

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import workflow
from styrmin_backend.store.models import ChangeRow, DeploymentRow, TaskRow

from .conftest import Stack

CREATE = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}


def _writer(stack: Stack) -> dict[str, str]:
    stack.add_driver()
    return stack.headers(stack.make_user("writer", Role.READ_WRITE))


def _counts(stack: Stack) -> tuple[int, int, int]:
    with stack.session() as session:
        return (
            session.scalar(select(func.count()).select_from(DeploymentRow)) or 0,
            session.scalar(select(func.count()).select_from(ChangeRow)) or 0,
            session.scalar(select(func.count()).select_from(TaskRow)) or 0,
        )


def test_create_records_revision_one_and_a_pending_create_task(stack: Stack) -> None:
    headers = _writer(stack)
    response = stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["deployment"]["revision"] == 1
    assert body["deployment"]["app_version"] == "1.0.0"  # the driver's default application version
    assert body["task"]["type"] == "create"
    assert body["task"]["status"] == "pending"
    assert body["task"]["requested_by"] == "writer"


def test_each_change_gets_the_next_revision(stack: Stack) -> None:
    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    revisions = [
        stack.client.post(
            "/api/v1/deployments/shop/stop", json={"components": ["task-worker"]}, headers=headers
        ),
        stack.client.post(
            "/api/v1/deployments/shop/start", json={"components": ["task-worker"]}, headers=headers
        ),
        stack.client.post("/api/v1/deployments/shop/upgrade", json={"app_version": "2.0"}, headers=headers),
        stack.client.put(
            "/api/v1/deployments/shop/configuration", json={"values": {"a": 1}}, headers=headers
        ),
        stack.client.delete("/api/v1/deployments/shop", headers=headers),
    ]
    assert [r.json()["task"]["revision"] for r in revisions] == [2, 3, 4, 5, 6]
    assert [r.json()["task"]["type"] for r in revisions] == [
        "stop",
        "start",
        "upgrade",
        "configure",
        "delete",
    ]


def test_a_change_request_reads_its_driver_versions_spec_not_its_archive(stack: Stack) -> None:
    # An archive can be megabytes (a chart with its dependencies): a stop or an upgrade needs only the
    # components and the default version from the spec.
    writer = _writer(stack)
    assert stack.client.post("/api/v1/deployments", json=CREATE, headers=writer).status_code == 202
    sent: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(stack.engine, "before_cursor_execute", note)
    try:
        stop = stack.client.post(
            "/api/v1/deployments/shop/stop", json={"components": ["task-worker"]}, headers=writer
        )
        upgrade = stack.client.post(
            "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0"}, headers=writer
        )
    finally:
        event.remove(stack.engine, "before_cursor_execute", note)
    assert stop.status_code == 202, stop.text
    assert upgrade.status_code == 202, upgrade.text
    assert any("drivers.spec" in statement for statement in sent)
    assert not [statement for statement in sent if "archive" in statement]


def test_upgrade_to_current_version_starts_no_task(stack: Stack) -> None:
    from .test_agent_protocol import _agent
    from .test_retry_and_status import _run

    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    _run(
        stack, _agent(stack), "1.0.0"
    )  # "Nothing to do" once the deployment runs it and its create succeeded
    before = _counts(stack)
    response = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "1.0.0"}, headers=headers
    )
    assert response.status_code == 202
    assert response.json()["task"] is None
    assert _counts(stack) == before


def test_bad_input_names_the_field_and_changes_nothing(stack: Stack) -> None:
    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    before = _counts(stack)
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("POST", "/api/v1/deployments", {**CREATE, "name": "Bad_Name"}, 422, "name"),
        (
            "POST",
            "/api/v1/deployments",
            {**CREATE, "name": "other", "driver_version": "9.9.9"},
            422,
            "driver_version",
        ),
        ("POST", "/api/v1/deployments", {**CREATE, "name": "other", "driver": "nope"}, 422, "driver"),
        ("POST", "/api/v1/deployments", CREATE, 409, "name"),
        ("POST", "/api/v1/deployments", {**CREATE, "name": "x", "extra": 1}, 422, "extra"),
        (
            "POST",
            "/api/v1/deployments",
            {**CREATE, "name": "other", "configuration": {"images": {"db": "postgres:16"}}},
            422,
            "configuration.images",
        ),
        ("POST", "/api/v1/deployments/shop/stop", {"components": ["nope"]}, 422, "components"),
        ("POST", "/api/v1/deployments/shop/stop", {"components": []}, 422, "components"),
        ("POST", "/api/v1/deployments/shop/upgrade", {}, 422, "app_version"),
        ("POST", "/api/v1/deployments/shop/upgrade", {"app_version": "not a version"}, 422, "app_version"),
        ("POST", "/api/v1/deployments/missing/upgrade", {"app_version": "2"}, 404, "name"),
        (
            "PUT",
            "/api/v1/deployments/shop/configuration",
            {"env": {"server": {"1BAD": "x"}}},
            422,
            "env.server.1BAD",
        ),
        ("PUT", "/api/v1/deployments/shop/configuration", {"images": {"server": " "}}, 422, "images"),
        (
            "PUT",
            "/api/v1/deployments/shop/configuration",
            {"images": {"server": "shop:{{ app.name }}"}},
            422,
            "images",
        ),
    ]
    for method, url, body, status, field in cases:
        response = stack.client.request(method, url, json=body, headers=headers)
        assert response.status_code == status, (url, body, response.text)
        assert response.json()["field"] == field, response.json()
        assert response.json()["message"]
    assert _counts(stack) == before


def test_a_normal_user_cannot_link_a_change_to_a_hook_step(stack: Stack) -> None:
    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    response = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["server"], "started_by_step": 1},
        headers=headers,
    )
    assert response.status_code == 403
    assert response.json()["field"] == "started_by_step"


def test_task_shows_steps_output_notes_and_the_tasks_its_hook_started(stack: Stack) -> None:
    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0"}, headers=headers
    )
    upgrade_id = upgrade.json()["task"]["id"]
    with stack.session() as session:
        workflow.start_task(session, upgrade_id)
        step = workflow.add_step(session, upgrade_id, hook_step_name(Hook.UPGRADE, Mode.CORE))
        workflow.add_step_note(session, step.id, "Deleted Job shop-migrate-1 of an earlier action.")
        step_id = step.id
    _, actions_token = stack.actions_token(task_id=upgrade_id)
    stop = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": step_id},
        headers=stack.headers(actions_token),
    )
    child_id = stop.json()["task"]["id"]
    with stack.session() as session:
        workflow.start_task(session, child_id)
        child_step = workflow.add_step(session, child_id, "Stop components")
        workflow.end_step(session, child_step.id)
        workflow.end_task(session, child_id)
        workflow.set_step_output(session, step_id, "line 199\nline 200\n", output_truncated=True)
        workflow.end_step(session, step_id, error="Job shop-migrate-2 failed with exit code 3.")
        workflow.end_task(session, upgrade_id, error="The upgrade hook failed.")

    task = stack.client.get(f"/api/v1/tasks/{upgrade_id}", headers=headers).json()
    assert task["status"] == "failed"
    assert task["error"] == "The upgrade hook failed."
    [shown] = task["steps"]
    assert shown["name"] == "Run the upgrade hook"
    assert shown["status"] == "failed"
    assert shown["error"] == "Job shop-migrate-2 failed with exit code 3."
    assert shown["output_tail"] == "line 199\nline 200\n"
    assert shown["output_truncated"] is True
    assert shown["notes"] == ["Deleted Job shop-migrate-1 of an earlier action."]
    assert [(t["id"], t["type"], t["status"]) for t in shown["started_tasks"]] == [
        (child_id, "stop", "succeeded")
    ]
    assert task["result"]["started_tasks"][0]["task_id"] == child_id
    assert task["result"]["started_tasks"][0]["status"] == "succeeded"

    child = stack.client.get(f"/api/v1/tasks/{child_id}", headers=headers).json()
    assert child["started_by"] == {
        "task_id": upgrade_id,
        "task_type": "upgrade",
        "step_id": step_id,
        "step_name": "Run the upgrade hook",
    }
    assert child["requested_by"] == "styrmin-actions"


def test_task_list_filters_and_pages(stack: Stack) -> None:
    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    stack.client.post("/api/v1/deployments", json={**CREATE, "name": "other"}, headers=headers)
    for _ in range(3):
        stack.client.post("/api/v1/deployments/shop/stop", json={"components": ["server"]}, headers=headers)
    shop = stack.client.get("/api/v1/tasks", params={"deployment": "shop"}, headers=headers).json()
    assert [t["type"] for t in shop["items"]] == ["stop", "stop", "stop", "create"]
    stops = stack.client.get("/api/v1/tasks", params={"type": "stop"}, headers=headers).json()["items"]
    assert len(stops) == 3
    seen: list[int] = []
    before = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"before": before} if before else {})}
        page = stack.client.get("/api/v1/tasks", params=params, headers=headers).json()
        seen += [t["id"] for t in page["items"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == 5
    bad = stack.client.get("/api/v1/tasks", params={"status": "done"}, headers=headers)
    assert bad.status_code == 422 and bad.json()["field"] == "status"


def test_missing_task_is_404_with_a_message(stack: Stack) -> None:
    headers = _writer(stack)
    response = stack.client.get("/api/v1/tasks/424242", headers=headers)
    assert response.status_code == 404
    assert response.json()["message"] == "There is no task 424242."


def test_an_action_asking_again_for_the_upgrade_its_step_started_gets_that_task_while_it_runs(
    stack: Stack,
) -> None:
    headers = _writer(stack)
    stack.client.post("/api/v1/deployments", json=CREATE, headers=headers)
    upgrade_id = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0"}, headers=headers
    ).json()["task"]["id"]
    with stack.session() as session:
        workflow.start_task(session, upgrade_id)
        step_id = workflow.add_step(session, upgrade_id, hook_step_name(Hook.UPGRADE, Mode.CORE)).id
    _, actions_token = stack.actions_token(task_id=upgrade_id)

    def ask(app_version: str) -> int:
        response = stack.client.post(
            "/api/v1/deployments/shop/upgrade",
            json={"app_version": app_version, "started_by_step": step_id},
            headers=stack.headers(actions_token),
        )
        assert response.status_code == 202, response.text
        task_id: int = response.json()["task"]["id"]
        return task_id

    first = ask("2.0")
    before = _counts(stack)
    # A Prefect retry of the half-done action asks again while the first task is still pending.
    assert ask("2.0") == first
    assert _counts(stack) == before
    # Another target is another change.
    other = ask("3.0")
    assert other != first
    with stack.session() as session:
        workflow.start_task(session, first)
        workflow.end_task(session, first)
    # Once the first has ended, asking again starts a new one.
    assert ask("2.0") not in (first, other)
