"""A failed change can be requested again or retried; the status says what failed and what runs."""

from __future__ import annotations

from typing import Any

from styrmin_backend.domain.roles import Role

from .conftest import Stack
from .test_agent_protocol import _agent, _deploy


def _run(stack: Stack, agent: dict[str, str], app_version: str, error: str | None = None) -> int:
    """Claim the next task and end it: applied at ``app_version``, or failed with ``error``."""
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    assert claim.status_code == 200, claim.text
    task_id: int = claim.json()["task"]["id"]
    body: dict[str, Any] = (
        {"error": error}
        if error
        else {"result": {"applied": {"app_version": app_version, "driver_version": "1.0.0"}}}
    )
    ended = stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json=body, headers=agent)
    assert ended.status_code == 200, ended.text
    return task_id


def _upgrade(stack: Stack, headers: dict[str, str], app_version: str) -> Any:
    return stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": app_version}, headers=headers
    )


def test_a_failed_upgrade_is_shown_then_requested_again_and_retried(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    admin = stack.headers(stack.token_for("admin"))
    _run(stack, agent, "1.0.0")
    first = _upgrade(stack, admin, "6.0.0").json()["task"]["id"]
    # Asking for the same versions while that upgrade waits is refused, saying what to wait for.
    again = _upgrade(stack, admin, "6.0.0")
    assert again.status_code == 409 and f"Task #{first}" in again.json()["message"]
    _run(stack, agent, "6.0.0", error="Step Run the upgrade hook failed.")

    shown = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert (shown["status"], shown["app_version"], shown["running_app_version"]) == (
        "upgrade-failed",
        "6.0.0",
        "1.0.0",
    )
    assert (
        "The upgrade to 6.0.0 failed" in shown["status_reason"]
        and "runs application 1.0.0" in shown["status_reason"]
    )
    listed = stack.client.get("/api/v1/deployments", headers=admin).json()
    assert [d["status"] for d in listed] == ["upgrade-failed"]

    # The same request again starts a new upgrade, from what the cluster runs.
    requested = _upgrade(stack, admin, "6.0.0")
    assert requested.status_code == 202, requested.text
    second = requested.json()["task"]
    assert second is not None and second["id"] != first
    _run(stack, agent, "6.0.0", error="Step Run the upgrade hook failed.")

    # Only the latest failed upgrade can be retried.
    older = stack.client.post(f"/api/v1/tasks/{first}/retry", headers=admin)
    assert older.status_code == 409 and f"task {second['id']} is" in older.json()["message"]
    reader = stack.headers(stack.make_user("reader", Role.READ_ONLY))
    assert stack.client.post(f"/api/v1/tasks/{second['id']}/retry", headers=reader).status_code == 403
    retried = stack.client.post(f"/api/v1/tasks/{second['id']}/retry", headers=admin)
    assert retried.status_code == 202, retried.text
    third = retried.json()["task"]
    assert (
        third["type"] == "upgrade" and third["id"] > second["id"] and third["revision"] > second["revision"]
    )
    assert retried.json()["deployment"]["status"] == "deploying"
    _run(stack, agent, "6.0.0")

    shown = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert (shown["status"], shown["running_app_version"]) == ("running", "6.0.0")
    # Now it runs what was asked and its last change succeeded: nothing to do.
    assert _upgrade(stack, admin, "6.0.0").json()["task"] is None
    succeeded = stack.client.post(f"/api/v1/tasks/{third['id']}/retry", headers=admin)
    assert (
        succeeded.status_code == 409
        and "only a failed or cancelled task can be retried" in succeeded.json()["message"]
    )


def test_a_failed_create_is_retried_and_then_runs(stack: Stack) -> None:
    created = _deploy(stack)
    agent = _agent(stack)
    admin = stack.headers(stack.token_for("admin"))
    _run(stack, agent, "1.0.0", error="Step Install the chart failed.")
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).json()["status"] == "failed"
    retried = stack.client.post(f"/api/v1/tasks/{created}/retry", headers=admin)
    assert retried.status_code == 202, retried.text
    assert retried.json()["task"]["type"] == "create"
    _run(stack, agent, "1.0.0")
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).json()["status"] == "running"


def test_retrying_a_missing_task_is_404(stack: Stack) -> None:
    admin = stack.headers(stack.token_for("admin"))
    assert stack.client.post("/api/v1/tasks/999/retry", headers=admin).status_code == 404


def test_a_deployment_made_again_under_a_deleted_ones_name_starts_with_no_past(stack: Stack) -> None:
    """The deleted deployment's changes are not the new one's: its status is its own create's."""
    _deploy(stack)
    agent = _agent(stack)
    admin = stack.headers(stack.token_for("admin"))
    _run(stack, agent, "1.0.0")
    _upgrade(stack, admin, "6.0.0")
    _run(stack, agent, "6.0.0", error="Step Run the upgrade hook failed.")
    deleting = stack.client.delete("/api/v1/deployments/shop", headers=admin)
    assert deleting.status_code == 202, deleting.text
    while (claim := stack.client.post("/api/v1/agent/claim", json={}, headers=agent)).status_code == 200:
        task_id = claim.json()["task"]["id"]
        ended = stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={}, headers=agent)
        assert ended.status_code == 200, ended.text
    gone = stack.client.get("/api/v1/deployments/shop", headers=admin)
    assert gone.status_code == 404, gone.text

    created = _deploy(stack)

    shown = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert (shown["status"], shown["status_task_id"]) == ("deploying", created)
    listed = stack.client.get("/api/v1/deployments", headers=admin).json()
    assert [(d["name"], d["status"]) for d in listed] == [("shop", "deploying")]
