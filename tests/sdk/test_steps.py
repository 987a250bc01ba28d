"""client.steps: what an action's primitives write on their hook step, as styrmin-actions of its own task."""

from __future__ import annotations

import pytest

import styrmin
from styrmin import Client

from .server import LiveServer


def _running_step(live_server: LiveServer, admin: Client, name: str) -> tuple[int, int, str]:
    """A deployment whose create task an agent claimed, with one step: (task, step, actions token)."""
    http = live_server.stack.client
    admin_headers = live_server.stack.headers(live_server.admin_token())
    key = http.post("/api/v1/agents", json={"name": f"agent-{name}", "cluster": name}, headers=admin_headers)
    agent = live_server.stack.headers(key.json()["key"])
    admin.deployments.create(name, namespace=name, driver="demo", driver_version="1.0.0", cluster=name)
    claim = http.post("/api/v1/agent/claim", json={}, headers=agent).json()
    task_id = claim["task"]["id"]
    step = http.post(
        f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Run the setup post-hook"}, headers=agent
    )
    return task_id, step.json()["id"], claim["actions_token"]


def test_an_action_leaves_a_note_and_output_on_its_hook_step(live_server: LiveServer, admin: Client) -> None:
    task_id, step_id, token = _running_step(live_server, admin, "noted")

    with Client(live_server.url, token, retries=0) as actions:
        actions.steps.add_note(step_id, "Deleted Job noted-migrate-1 of an earlier action, which had ended.")
        actions.steps.store_output(step_id, "migrating...\nError: table users is locked", truncated=True)

    (step,) = admin.tasks.get(task_id).steps
    assert step.notes == ["Deleted Job noted-migrate-1 of an earlier action, which had ended."]
    assert step.output_tail is not None and step.output_tail.endswith("Error: table users is locked")
    assert step.output_truncated is True


def test_a_person_cannot_write_on_a_step(live_server: LiveServer, admin: Client) -> None:
    _, step_id, _ = _running_step(live_server, admin, "guarded")

    with pytest.raises(styrmin.ForbiddenError, match="Only an agent, or the actions of a reconciliation"):
        admin.steps.add_note(step_id, "not an action")
    assert admin.tasks.get(admin.tasks.list(deployment="guarded").items[0].id).steps[0].notes == []
