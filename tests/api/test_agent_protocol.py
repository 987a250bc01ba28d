"""Agents claim tasks with a lease, record steps, and end tasks; actions tokens live as long as a task."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from styrmin_backend.clock import as_utc, utcnow
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.plan import PLAN_VERSION
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.steps import INSTALL_STEP, STOP_STEP
from styrmin_backend.services import agents, tasks
from styrmin_backend.store.models import TaskRow

from .conftest import Stack

CREATE = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}


SERVER_STATUS = {
    "name": "server",
    "kind": "Deployment",
    "workload": "shop-server",
    "replicas": 1,
    "ready_replicas": 1,
    "images": ["example.com/shop/server:1.0.0"],
}
"""The component status an agent reports of the example's server: one replica, ready."""


def _agent(stack: Stack, name: str = "local-agent", cluster: str = "local") -> dict[str, str]:
    admin = stack.headers(stack.token_for("admin"))
    response = stack.client.post("/api/v1/agents", json={"name": name, "cluster": cluster}, headers=admin)
    assert response.status_code == 201, response.text
    return stack.headers(response.json()["key"])


def _deploy(stack: Stack, name: str = "shop") -> int:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    response = stack.client.post("/api/v1/deployments", json={**CREATE, "name": name}, headers=admin)
    task_id: int = response.json()["task"]["id"]
    return task_id


def _upgrade_in_its_hook(stack: Stack) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """Deployment "shop" created, then upgraded to 2.0.0 and the upgrade claimed and in its core hook
    step: the agent's headers, the upgrade's claim and the hook step."""
    _deploy(stack)
    agent = _agent(stack)
    create = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    stack.client.post(f"/api/v1/agent/tasks/{create['task']['id']}/end", json={}, headers=agent)
    admin = stack.headers(stack.token_for("admin"))
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0.0"}, headers=admin
    ).json()["task"]["id"]
    claim: dict[str, Any] = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claim["task"]["id"] == upgrade
    hook: dict[str, Any] = stack.client.post(
        f"/api/v1/agent/tasks/{upgrade}/steps",
        json={"name": hook_step_name(Hook.UPGRADE, Mode.CORE)},
        headers=agent,
    ).json()
    return agent, claim, hook


def test_claim_starts_the_oldest_pending_task_and_gives_a_working_actions_token(stack: Stack) -> None:
    task_id = _deploy(stack)
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    assert claim.status_code == 200, claim.text
    body = claim.json()
    assert body["task"]["id"] == task_id and body["task"]["status"] == "running"
    assert body["change_type"] == "create"
    assert body["deployment"]["namespace"] == "shop"
    me = stack.client.get("/api/v1/whoami", headers=stack.headers(body["actions_token"])).json()
    assert me["username"] == "styrmin-actions"
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 204


def test_two_agents_never_claim_the_same_task(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    for name in ("a", "b", "c"):
        stack.client.post("/api/v1/deployments", json={**CREATE, "name": name}, headers=admin)
    first, second = _agent(stack, "one"), _agent(stack, "two")
    claimed = []
    for agent in (first, second, first, second):
        response = stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
        if response.status_code == 200:
            claimed.append(response.json()["task"]["id"])
    assert len(claimed) == len(set(claimed)) == 3


def test_an_agent_only_claims_tasks_of_its_cluster(stack: Stack) -> None:
    _deploy(stack)
    elsewhere = _agent(stack, "edge", cluster="edge")
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=elsewhere).status_code == 204


def test_ending_the_task_revokes_its_actions_token_and_sets_the_deployment_status(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    task_id, token = claim["task"]["id"], claim["actions_token"]
    step = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Install"}, headers=agent
    ).json()
    stack.client.post(f"/api/v1/agent/steps/{step['id']}/end", json={}, headers=agent)
    ended = stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={}, headers=agent)
    assert ended.json()["status"] == "succeeded"
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(token)).status_code == 401
    admin = stack.headers(stack.token_for("admin"))
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).json()["status"] == "running"


def test_a_task_whose_agent_stopped_ends_failed_saying_so(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={"lease_seconds": 5}, headers=agent).json()
    task_id, token = claim["task"]["id"], claim["actions_token"]
    stack.client.post(f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Install"}, headers=agent)
    with stack.session() as session:
        session.execute(update(TaskRow).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 204
    admin = stack.headers(stack.token_for("admin"))
    task = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()
    assert task["status"] == "failed"
    assert task["error"].startswith("The agent stopped while it ran this task")
    assert task["steps"][0]["status"] == "failed"
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(token)).status_code == 401
    # The agent's late end is answered (not refused): the task stays failed, saying the agent finished.
    late = stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={}, headers=agent)
    assert late.status_code == 200 and late.json()["status"] == "failed"
    assert "The agent finished the task successfully at" in late.json()["error"]


def test_actions_write_notes_only_to_steps_of_their_own_task(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    stack.client.post("/api/v1/deployments", json=CREATE, headers=admin)
    stack.client.post("/api/v1/deployments", json={**CREATE, "name": "other"}, headers=admin)
    agent = _agent(stack)
    mine = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    theirs = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    my_step = stack.client.post(
        f"/api/v1/agent/tasks/{mine['task']['id']}/steps",
        json={"name": "Run the setup post-hook"},
        headers=agent,
    ).json()
    their_step = stack.client.post(
        f"/api/v1/agent/tasks/{theirs['task']['id']}/steps", json={"name": "x"}, headers=agent
    ).json()
    actions = stack.headers(mine["actions_token"])
    ok = stack.client.post(
        f"/api/v1/agent/steps/{my_step['id']}/notes",
        json={"note": "Deleted Job shop-migrate-1."},
        headers=actions,
    )
    assert ok.status_code == 200
    refused = stack.client.post(
        f"/api/v1/agent/steps/{their_step['id']}/notes", json={"note": "x"}, headers=actions
    )
    assert refused.status_code == 403
    output = stack.client.put(
        f"/api/v1/agent/steps/{my_step['id']}/output",
        json={"output_tail": f"token={mine['actions_token']}\nfailed\n", "output_truncated": True},
        headers=actions,
    )
    assert output.status_code == 200
    task = stack.client.get(f"/api/v1/tasks/{mine['task']['id']}", headers=admin).json()
    assert task["steps"][0]["notes"] == ["Deleted Job shop-migrate-1."]
    assert mine["actions_token"] not in task["steps"][0]["output_tail"]
    assert "<redacted>" in task["steps"][0]["output_tail"]


def test_a_revoked_agent_key_is_refused(stack: Stack) -> None:
    agent = _agent(stack)
    admin = stack.headers(stack.token_for("admin"))
    stack.client.delete("/api/v1/agents/local-agent", headers=admin)
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 401


def test_an_agent_call_without_an_agent_key_is_refused_before_its_body_is_read(stack: Stack) -> None:
    # A body the route would refuse on its own (last_step_id with an error), sent without credentials
    # and with a user's token: refused as unauthenticated, not as a bad body.
    bad_body = {"error": "it broke", "last_step_id": 1}
    for headers in ({}, stack.headers(stack.token_for("admin"))):
        response = stack.client.post("/api/v1/agent/tasks/1/end", json=bad_body, headers=headers)
        assert response.status_code == 401, response.text
    note = stack.client.post("/api/v1/agent/steps/1/notes", json={"note": ""})
    assert note.status_code == 401, note.text
    # A key that no agent has is checked with the work, in the same transaction.
    unknown = {"Authorization": "Bearer sta_not-a-key"}
    response = stack.client.post("/api/v1/agent/tasks/1/end", json={"error": "it broke"}, headers=unknown)
    assert response.status_code == 401, response.text


def test_only_admins_register_agents(stack: Stack) -> None:
    writer = stack.headers(stack.make_user("writer", Role.READ_WRITE))
    response = stack.client.post("/api/v1/agents", json={"name": "x"}, headers=writer)
    assert response.status_code == 403


def test_an_agent_reports_component_workloads_of_its_own_cluster_only(stack: Stack) -> None:
    _deploy(stack)
    report = {"components": [SERVER_STATUS]}
    mine = stack.client.put("/api/v1/agent/deployments/shop/components", json=report, headers=_agent(stack))
    assert mine.status_code == 200, mine.text
    admin = stack.headers(stack.token_for("admin"))
    shown = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert shown["components_status"][0]["ready_replicas"] == 1 and shown["components_status_at"]
    other = stack.client.put(
        "/api/v1/agent/deployments/shop/components", json=report, headers=_agent(stack, "edge", "edge")
    )
    assert other.status_code == 404


def test_an_agent_ends_a_task_and_reports_its_components_in_one_call(stack: Stack) -> None:
    task_id = _deploy(stack)
    agent = _agent(stack)
    stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    misspelt = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end",
        json={"components": [{**SERVER_STATUS, "ready_replica": 1}]},
        headers=agent,
    )
    assert misspelt.status_code == 422 and "ready_replica" in misspelt.text

    ended = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end", json={"components": [SERVER_STATUS]}, headers=agent
    )

    assert ended.status_code == 200 and ended.json()["status"] == "succeeded", ended.text
    admin = stack.headers(stack.token_for("admin"))
    shown = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert shown["status"] == "running"
    assert (
        shown["components_status"][0]["images"] == SERVER_STATUS["images"] and shown["components_status_at"]
    )


def test_a_task_that_succeeds_ends_its_last_step_in_the_same_call(stack: Stack) -> None:
    task_id = _deploy(stack)
    _deploy(stack, "other")
    agent = _agent(stack)
    claims = [stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json() for _ in range(2)]
    other_id = next(c["task"]["id"] for c in claims if c["task"]["id"] != task_id)
    step = stack.client.post(f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Install"}, headers=agent)
    other_step = stack.client.post(
        f"/api/v1/agent/tasks/{other_id}/steps", json={"name": "Install"}, headers=agent
    ).json()
    admin = stack.headers(stack.token_for("admin"))

    # A step of another task, or a failed task, is refused by name, and changes nothing.
    foreign = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end", json={"last_step_id": other_step["id"]}, headers=agent
    )
    assert foreign.status_code == 422 and f"not a step of task {task_id}" in foreign.text
    with_error = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end",
        json={"error": "boom", "last_step_id": step.json()["id"]},
        headers=agent,
    )
    assert with_error.status_code == 422 and "last_step_id" in with_error.text
    for unchanged in (task_id, other_id):
        shown = stack.client.get(f"/api/v1/tasks/{unchanged}", headers=admin).json()
        assert shown["status"] == "running" and shown["steps"][0]["status"] == "running"

    ended = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end",
        json={"last_step_id": step.json()["id"], "components": [SERVER_STATUS]},
        headers=agent,
    )

    assert ended.status_code == 200 and ended.json()["status"] == "succeeded", ended.text
    task = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()
    assert task["steps"][0]["status"] == "succeeded"
    assert task["steps"][0]["ended_at"] <= task["ended_at"]
    # Sent again (its first answer lost), it answers the ended task as it is.
    again = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end", json={"last_step_id": step.json()["id"]}, headers=agent
    )
    assert again.status_code == 200 and again.json()["status"] == "succeeded"


def test_a_task_failing_after_its_action_stopped_a_component_leaves_the_upgrade_failed(
    stack: Stack,
) -> None:
    agent, claim, hook = _upgrade_in_its_hook(stack)
    upgrade = claim["task"]["id"]
    admin = stack.headers(stack.token_for("admin"))
    # The hook's action stops a component (a later revision), which the agent runs to success...
    stop = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": hook["id"]},
        headers=stack.headers(claim["actions_token"]),
    )
    assert stop.status_code == 202, stop.text
    stop_task = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()["task"]["id"]
    stack.client.post(f"/api/v1/agent/tasks/{stop_task}/end", json={}, headers=agent)
    # The upgrade still runs, so the deployment is being deployed, whatever its started tasks did...
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).json()["status"] == "deploying"
    # ...then its migration fails: the upgrade's end decides the deployment's status.
    stack.client.post(
        f"/api/v1/agent/tasks/{upgrade}/end",
        json={"error": "Step Run the upgrade hook failed."},
        headers=agent,
    )
    shown = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert shown["status"] == "upgrade-failed"
    assert shown["status_task_id"] == upgrade and "The upgrade to 2.0.0 failed" in shown["status_reason"]


def test_tasks_started_by_actions_are_claimed_first_even_by_a_full_agent(stack: Stack) -> None:
    agent, upgrade, hook = _upgrade_in_its_hook(stack)
    admin = stack.headers(stack.token_for("admin"))
    # Another deployment's change waits, older than the task the upgrade's action starts next.
    other = stack.client.post("/api/v1/deployments", json={**CREATE, "name": "other"}, headers=admin)
    stop = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": hook["id"]},
        headers=stack.headers(upgrade["actions_token"]),
    )
    # An agent whose slots are all taken asks only for tasks that actions started...
    only = {"started_by_actions_only": True}
    first = stack.client.post("/api/v1/agent/claim", json=only, headers=agent)
    assert first.status_code == 200, first.text
    assert first.json()["task"]["id"] == stop.json()["task"]["id"]
    assert first.json()["task"]["parent_task_id"] == upgrade["task"]["id"]
    # ...and gets nothing else; the other change waits for a free slot.
    assert stack.client.post("/api/v1/agent/claim", json=only, headers=agent).status_code == 204
    later = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert later["task"]["id"] == other.json()["task"]["id"]


def test_a_task_started_by_an_action_comes_before_older_pending_tasks(stack: Stack) -> None:
    agent, upgrade, hook = _upgrade_in_its_hook(stack)
    admin = stack.headers(stack.token_for("admin"))
    stack.client.post("/api/v1/deployments", json={**CREATE, "name": "older"}, headers=admin)
    stop = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": hook["id"]},
        headers=stack.headers(upgrade["actions_token"]),
    )
    claimed = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claimed["task"]["id"] == stop.json()["task"]["id"]


def test_renewing_a_lease_extends_it_and_a_lost_task_is_refused(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    task_id = stack.client.post("/api/v1/agent/claim", json={"lease_seconds": 5}, headers=agent).json()[
        "task"
    ]["id"]
    renewed = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/lease", json={"lease_seconds": 600}, headers=agent
    )
    assert renewed.status_code == 200, renewed.text
    with stack.session() as session:
        row = session.get(TaskRow, task_id)
        assert row is not None and row.lease_expires_at is not None
        assert as_utc(row.lease_expires_at) > utcnow() + timedelta(seconds=500)
    other = _agent(stack, "other-agent")
    refused = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/lease", json={"lease_seconds": 60}, headers=other
    )
    assert refused.status_code == 409 and "not held by agent other-agent" in refused.json()["message"]
    stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={}, headers=agent)
    ended = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/lease", json={"lease_seconds": 60}, headers=agent
    )
    assert ended.status_code == 409 and f"Task {task_id} is succeeded" in ended.json()["message"]


def test_a_read_waiting_for_a_task_answers_with_its_end_once_the_agent_ends_it(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    task_id = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()["task"]["id"]
    reader = stack.headers(stack.make_user("reader", Role.READ_ONLY))
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            stack.client.get, f"/api/v1/tasks/{task_id}", params={"wait_until_end": 60}, headers=reader
        )
        time.sleep(0.5)  # the read is waiting on the server
        stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={}, headers=agent)
        answer = waiting.result(timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "succeeded"


def test_a_read_waiting_for_a_task_that_goes_on_answers_with_it_still_running(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    task_id = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()["task"]["id"]
    admin = stack.headers(stack.token_for("admin"))
    answer = stack.client.get(f"/api/v1/tasks/{task_id}", params={"wait_until_end": 0.2}, headers=admin)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "running"


def test_a_waiting_read_is_refused_without_a_token_or_beyond_a_minute(stack: Stack) -> None:
    task_id = _deploy(stack)
    assert stack.client.get(f"/api/v1/tasks/{task_id}", params={"wait_until_end": 5}).status_code == 401
    admin = stack.headers(stack.token_for("admin"))
    too_long = stack.client.get(f"/api/v1/tasks/{task_id}", params={"wait_until_end": 61}, headers=admin)
    assert too_long.status_code == 422
    assert "wait_until_end" in too_long.text
    missing = stack.client.get("/api/v1/tasks/999999", params={"wait_until_end": 5}, headers=admin)
    assert missing.status_code == 404


def test_each_change_of_a_deployment_starts_as_soon_as_an_agent_has_a_free_slot(stack: Stack) -> None:
    create = _deploy(stack)
    admin = stack.headers(stack.token_for("admin"))
    configure = stack.client.put(
        "/api/v1/deployments/shop/configuration", json={"values": {"a": 1}}, headers=admin
    ).json()["task"]["id"]
    first, second = _agent(stack, "one"), _agent(stack, "two")
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=first).json()["task"]["id"] == create
    # Its own workflow at once: only the Helm operations of the two take turns (see test_helm_lock).
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=second).json()["task"]["id"] == configure


def test_agents_racing_for_one_deployments_changes_claim_each_exactly_once(stack: Stack) -> None:
    _deploy(stack)
    admin = stack.headers(stack.token_for("admin"))
    for value in range(7):
        stack.client.put(
            "/api/v1/deployments/shop/configuration", json={"values": {"a": value}}, headers=admin
        )
    keys = []
    for name in ("one", "two", "three", "four"):
        made = stack.client.post("/api/v1/agents", json={"name": name, "cluster": "local"}, headers=admin)
        keys.append(made.json()["key"])
    lease, lifetime = timedelta(seconds=30), timedelta(minutes=10)

    def claim_all(key: str) -> list[int]:
        claimed = []
        while True:
            for _attempt in range(20):  # a database busy with the other claims answers again soon
                try:
                    with stack.session() as session:
                        found = agents.claim_next_task(
                            session, agents.authenticate_agent(session, key), lease, lifetime
                        )
                    break
                except Exception:
                    time.sleep(0.05)
            else:
                raise AssertionError("a claim kept failing")
            if found is None:
                return claimed
            claimed.append(found.task.id)

    with ThreadPoolExecutor(max_workers=len(keys)) as pool:
        results = list(pool.map(claim_all, keys))
    claimed = [task_id for result in results for task_id in result]
    assert len(claimed) == len(set(claimed)) == 8


def test_a_change_the_actions_of_a_running_change_request_runs_beside_it(stack: Stack) -> None:
    create = _deploy(stack)
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claim["task"]["id"] == create
    # Not linked to a hook step (a plain SDK call in an action), yet its change waits for it.
    start = stack.client.post(
        "/api/v1/deployments/shop/start",
        json={"components": ["task-worker"]},
        headers=stack.headers(claim["actions_token"]),
    )
    assert start.status_code == 202, start.text
    beside = stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    assert beside.status_code == 200, beside.text
    assert beside.json()["task"]["id"] == start.json()["task"]["id"]


def test_the_openapi_document_shows_each_kind_of_claimed_change_and_the_task_result(stack: Stack) -> None:
    document = stack.client.get("/api/openapi.json").json()
    schemas = document["components"]["schemas"]
    change = schemas["ClaimOut"]["properties"]["change"]
    members = {ref.rsplit("/", 1)[-1] for ref in change["discriminator"]["mapping"].values()}
    assert members == {
        "CreateChange",
        "UpgradeChange",
        "ConfigureChange",
        "StopChange",
        "StartChange",
        "DeleteChange",
        "BackupChange",
        "RestoreChange",
        "DeleteBackupChange",
    }
    assert change["discriminator"]["propertyName"] == "type"
    assert "Target" in schemas and "ComponentStatus" in schemas
    end = document["paths"]["/api/v1/agent/tasks/{task_id}/end"]["post"]["requestBody"]
    body_ref = end["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert "TaskResult" in str(schemas[body_ref]["properties"]["result"])
    assert "ComponentStatus" in str(schemas[body_ref]["properties"]["components"])


def test_a_claimed_upgrade_carries_the_versions_the_server_resolved(stack: Stack) -> None:
    create_id = _deploy(stack)
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claim["change"]["type"] == "create"
    assert claim["change"]["target"]["app_version"] == claim["deployment"]["app_version"]
    assert claim["change"]["target"]["current_app_version"] is None
    applied = {"applied": {"app_version": claim["deployment"]["app_version"], "driver_version": "1.0.0"}}
    ended = stack.client.post(f"/api/v1/agent/tasks/{create_id}/end", json={"result": applied}, headers=agent)
    assert ended.status_code == 200, ended.text
    admin = stack.headers(stack.token_for("admin"))
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "9.9.9"}, headers=admin
    )
    assert upgrade.status_code in (200, 202), upgrade.text
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claim["change"]["type"] == "upgrade"
    assert claim["change"]["target"]["app_version"] == "9.9.9"
    assert claim["change"]["target"]["driver_version"] == "1.0.0"
    assert claim["change"]["target"]["current_app_version"] == applied["applied"]["app_version"]


def test_an_unknown_part_of_a_task_result_is_refused_naming_it(stack: Stack) -> None:
    task_id = _deploy(stack)
    agent = _agent(stack)
    stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    ended = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/end", json={"result": {"aplied": {}}}, headers=agent
    )
    assert ended.status_code == 422 and "aplied" in ended.text


def test_a_task_ending_in_this_server_wakes_the_reads_of_that_task_once_it_is_committed(
    stack: Stack,
) -> None:
    # The wait is far longer than the test allows, so only the wake-up can end it in time.
    task_id = _deploy(stack)
    other_id = _deploy(stack, name="other")

    async def wait_while(end: Callable[[], None], allowed: float) -> bool:
        mark = tasks.task_end_mark()
        waiting = asyncio.create_task(tasks.wait_for_task_end(task_id, mark, timeout=600))
        await asyncio.sleep(0)
        await asyncio.to_thread(end)
        try:
            await asyncio.wait_for(asyncio.shield(waiting), allowed)
        except TimeoutError:
            waiting.cancel()
            return False
        return True

    def end(which: int, status: str, roll_back: bool = False) -> Callable[[], None]:
        def ending() -> None:
            with contextlib.suppress(RuntimeError), stack.session() as session:
                task = session.get(TaskRow, which)
                assert task is not None
                task.status = status
                session.flush()
                if roll_back:
                    raise RuntimeError("rolled back")

        return ending

    # A wake-up comes at the end's commit or rollback, which is over before this window opens.
    assert not asyncio.run(wait_while(end(task_id, "failed", roll_back=True), 0.5)), (
        "a rolled-back end woke the reads"
    )
    assert not asyncio.run(wait_while(end(other_id, "succeeded"), 0.5)), "another task's end woke the reads"
    assert asyncio.run(wait_while(end(task_id, "succeeded"), 60)), "a committed end did not wake the reads"


def _task_steps(stack: Stack, task_id: int) -> list[dict[str, Any]]:
    admin = stack.headers(stack.token_for("admin"))
    steps: list[dict[str, Any]] = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()["steps"]
    return steps


def test_a_claim_at_the_agents_plan_version_starts_the_plans_first_step(stack: Stack) -> None:
    agent, claim, hook = _upgrade_in_its_hook(stack)
    # The upgrade's core hook runs the driver's action (its plan reads the driver's spec)...
    assert claim["first_step"] is None  # claimed without plan_version: the agent started the hook
    stop = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": hook["id"]},
        headers=stack.headers(claim["actions_token"]),
    ).json()["task"]["id"]
    claimed = stack.client.post("/api/v1/agent/claim", json={"plan_version": PLAN_VERSION}, headers=agent)
    assert claimed.status_code == 200, claimed.text
    first = claimed.json()["first_step"]
    # ...and a stop's first step, started with the claim, is on the task, running.
    assert first["name"] == STOP_STEP
    assert [(s["id"], s["name"], s["status"]) for s in _task_steps(stack, stop)] == [
        (first["id"], STOP_STEP, "running")
    ]
    # The agent starting it again gets the same step, and the task ends with that one step.
    again = stack.client.post(f"/api/v1/agent/tasks/{stop}/steps", json={"name": STOP_STEP}, headers=agent)
    assert again.json()["id"] == first["id"]
    ended = stack.client.post(
        f"/api/v1/agent/tasks/{stop}/end", json={"last_step_id": first["id"]}, headers=agent
    )
    assert ended.json()["status"] == "succeeded", ended.text
    assert [s["status"] for s in _task_steps(stack, stop)] == ["succeeded"]


def test_a_claimed_upgrades_first_step_is_its_hook_from_the_drivers_actions(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    create = stack.client.post("/api/v1/agent/claim", json={"plan_version": PLAN_VERSION}, headers=agent)
    assert create.json()["first_step"]["name"] == INSTALL_STEP  # the example has no setup pre hook
    created = create.json()["task"]["id"]
    stack.client.post(
        f"/api/v1/agent/tasks/{created}/end",
        json={"last_step_id": create.json()["first_step"]["id"]},
        headers=agent,
    )
    admin = stack.headers(stack.token_for("admin"))
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0.0"}, headers=admin
    ).json()["task"]["id"]
    claim = stack.client.post(
        "/api/v1/agent/claim", json={"plan_version": PLAN_VERSION}, headers=agent
    ).json()
    assert claim["task"]["id"] == upgrade
    assert claim["first_step"]["name"] == hook_step_name(Hook.UPGRADE, Mode.CORE)
    assert [s["name"] for s in _task_steps(stack, upgrade)] == [hook_step_name(Hook.UPGRADE, Mode.CORE)]


def test_a_claim_at_another_plan_version_or_none_leaves_the_steps_to_the_agent(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    for name in ("a", "b"):
        stack.client.post("/api/v1/deployments", json={**CREATE, "name": name}, headers=admin)
    agent = _agent(stack)
    for body in ({"plan_version": PLAN_VERSION + 1}, {}):
        claim = stack.client.post("/api/v1/agent/claim", json=body, headers=agent).json()
        assert claim["first_step"] is None
        assert _task_steps(stack, claim["task"]["id"]) == []


def test_a_malformed_plan_version_is_refused_naming_it_and_claims_nothing(stack: Stack) -> None:
    task_id = _deploy(stack)
    agent = _agent(stack)
    for bad in ("1", 0, 1.5):
        refused = stack.client.post("/api/v1/agent/claim", json={"plan_version": bad}, headers=agent)
        assert refused.status_code == 422 and "plan_version" in refused.text, refused.text
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    assert claim["task"]["id"] == task_id and _task_steps(stack, task_id) == []


def test_what_a_task_records_never_holds_a_secret_value_of_its_configuration(stack: Stack) -> None:
    # Helm and commands quote the values they could not use: a step's error, a note, a command's output
    # and the task's error are redacted with the change's secret values, wherever the agent's text holds them.
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    password, api_key = "plain-word-hunter2", "k3y-of-the-shop-api"
    created = stack.client.post(
        "/api/v1/deployments",
        json={**CREATE, "configuration": {"values": {"db": {"password": password}},
                                          "env": {"server": {"SHOP_API_KEY": api_key}}}},
        headers=admin,
    )  # fmt: skip
    assert created.status_code == 202, created.text
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    task_id, actions = claim["task"]["id"], stack.headers(claim["actions_token"])
    step = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Install"}, headers=agent
    ).json()
    said = f'Deployment "shop-server" is invalid: spec.replicas: Invalid value: "{password}" ({api_key})'
    for answer in (
        stack.client.post(f"/api/v1/agent/steps/{step['id']}/notes", json={"note": said}, headers=actions),
        stack.client.put(
            f"/api/v1/agent/steps/{step['id']}/output",
            json={"output_tail": f"connecting with {password}\n", "output_truncated": False},
            headers=actions,
        ),
        stack.client.post(f"/api/v1/agent/steps/{step['id']}/end", json={"error": said}, headers=agent),
    ):
        assert answer.status_code == 200, answer.text
    ended = stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={"error": said}, headers=agent)
    assert ended.status_code == 200, ended.text

    task = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin)
    assert password not in task.text and api_key not in task.text
    (recorded,) = task.json()["steps"]
    assert (
        recorded["error"]
        == 'Deployment "shop-server" is invalid: spec.replicas: Invalid value: "<redacted>" (<redacted>)'
    )
    assert recorded["notes"] == [recorded["error"]]
    assert recorded["output_tail"] == "connecting with <redacted>\n"
    assert task.json()["error"] == recorded["error"]
