"""One Helm operation at a time per deployment (the lock agents take), why a task waits, and cancel."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import update

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.plan import PLAN_VERSION
from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import DriverReport, read_driver
from styrmin_backend.services import drivers
from styrmin_backend.services.cancel import CANCELLED_WITH_PARENT
from styrmin_backend.services.helm_locks import WAITS_FOR_HELM_NOTE
from styrmin_backend.store.models import AgentRow, HelmLockRow
from tests.support.drivers import driver_folder

from .conftest import Stack
from .test_agent_protocol import CREATE, INSTALL_STEP, _agent, _deploy

LOCK = {"namespace": "shop", "release": "shop", "lease_seconds": 30}


def _claim(stack: Stack, agent: dict[str, str]) -> dict[str, Any]:
    claim = stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    assert claim.status_code == 200, claim.text
    body: dict[str, Any] = claim.json()
    return body


def _two_changes_running(stack: Stack) -> tuple[dict[str, str], dict[str, str], int, int]:
    """Deployment "shop" with its create claimed by agent one and a configuration change by agent two."""
    create = _deploy(stack)
    admin = stack.headers(stack.token_for("admin"))
    configure = stack.client.put(
        "/api/v1/deployments/shop/configuration", json={"values": {"a": 1}}, headers=admin
    ).json()["task"]["id"]
    one, two = _agent(stack, "one"), _agent(stack, "two")
    assert _claim(stack, one)["task"]["id"] == create
    assert _claim(stack, two)["task"]["id"] == configure
    return one, two, create, configure


def _lock(stack: Stack, agent: dict[str, str], task_id: int, action: str = "") -> Any:
    return stack.client.post(f"/api/v1/agent/tasks/{task_id}/helm-lock{action}", json=LOCK, headers=agent)


def test_a_second_changes_helm_operation_waits_for_the_first_and_its_step_says_for_which(
    stack: Stack,
) -> None:
    one, two, create, configure = _two_changes_running(stack)
    stack.client.post(f"/api/v1/agent/tasks/{create}/steps", json={"name": "Install"}, headers=one)
    stack.client.post(
        f"/api/v1/agent/tasks/{configure}/steps", json={"name": "Apply the configuration"}, headers=two
    )
    assert _lock(stack, one, create).json() == {"acquired": True, "holder_task_id": create}
    for _ in range(2):  # asking again notes it once
        assert _lock(stack, two, configure).json() == {"acquired": False, "holder_task_id": create}

    admin = stack.headers(stack.token_for("admin"))
    waiting = stack.client.get(f"/api/v1/tasks/{configure}", headers=admin).json()
    assert waiting["waiting"]["reason"] == "helm-operation" and waiting["waiting"]["task_id"] == create
    assert f"Helm operation of task {create}" in waiting["waiting"]["message"]
    assert waiting["steps"][0]["notes"] == [WAITS_FOR_HELM_NOTE.format(holder=create, release="shop")]
    assert stack.client.get(f"/api/v1/tasks/{create}", headers=admin).json()["waiting"] is None

    assert _lock(stack, one, create, "/renew").status_code == 204
    assert _lock(stack, two, configure, "/renew").status_code == 409  # it does not hold it
    assert _lock(stack, one, create, "/release").status_code == 204
    assert _lock(stack, two, configure).json() == {"acquired": True, "holder_task_id": configure}
    assert stack.client.get(f"/api/v1/tasks/{configure}", headers=admin).json()["waiting"] is None


def test_a_helm_lock_whose_holder_crashed_expires_and_the_next_task_takes_it(stack: Stack) -> None:
    one, two, create, configure = _two_changes_running(stack)
    assert _lock(stack, one, create).json()["acquired"] is True
    with stack.session() as session:
        session.execute(update(HelmLockRow).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert _lock(stack, two, configure).json() == {"acquired": True, "holder_task_id": configure}
    assert _lock(stack, one, create, "/renew").status_code == 409


def test_a_tasks_end_lets_go_of_its_helm_lock_only_when_asked(stack: Stack) -> None:
    one, two, create, configure = _two_changes_running(stack)
    assert _lock(stack, one, create).json()["acquired"] is True
    end = stack.client.post(f"/api/v1/agent/tasks/{create}/end", json={}, headers=one)
    assert end.status_code == 200, end.text
    # Ended without release_helm_locks: the lock stays until released or its lease runs out.
    assert _lock(stack, two, configure).json() == {"acquired": False, "holder_task_id": create}
    with stack.session() as session:
        session.execute(update(HelmLockRow).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert _lock(stack, two, configure).json()["acquired"] is True
    wrong = stack.client.post(
        f"/api/v1/agent/tasks/{configure}/end", json={"release_helm_locks": "yes please"}, headers=two
    )
    assert wrong.status_code == 422 and "release_helm_locks" in wrong.text
    assert _lock(stack, two, configure, "/renew").status_code == 204  # the refused end changed nothing
    end = stack.client.post(
        f"/api/v1/agent/tasks/{configure}/end", json={"release_helm_locks": True}, headers=two
    )
    assert end.status_code == 200, end.text
    with stack.session() as session:
        assert session.query(HelmLockRow).count() == 0


def test_a_pending_task_says_whether_no_agent_is_connected_none_claims_or_all_slots_are_taken(
    stack: Stack,
) -> None:
    task_id = _deploy(stack)
    admin = stack.headers(stack.token_for("admin"))
    waiting = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()["waiting"]
    assert (
        waiting["reason"] == "no-agent" and 'No agent of cluster "local" is connected' in waiting["message"]
    )
    agent = _agent(stack)
    # The agent calls, yet claims nothing (as one whose Prefect server does not answer): it is connected.
    stack.client.post("/api/v1/agent/claim", json={"started_by_actions_only": True}, headers=agent)
    waiting = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()["waiting"]
    assert waiting["reason"] == "not-claimed" and "has not claimed it yet" in waiting["message"]
    # Once a task of the cluster runs, a pending one waits for a slot.
    other = _deploy(stack, "shop-2")
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()["task"]["id"] == task_id
    waiting = stack.client.get(f"/api/v1/tasks/{other}", headers=admin).json()["waiting"]
    assert waiting["reason"] == "slots-taken" and "(1 task(s) running)" in waiting["message"]
    with stack.session() as session:  # an agent silent for two minutes no longer counts
        session.execute(update(AgentRow).values(last_seen_at=utcnow() - timedelta(minutes=2)))
    assert stack.client.get(f"/api/v1/tasks/{other}", headers=admin).json()["waiting"]["reason"] == "no-agent"


def test_cancelling_a_pending_task_takes_it_out_of_the_queue(stack: Stack) -> None:
    task_id = _deploy(stack)
    writer = stack.headers(stack.make_user("wanda", Role.READ_WRITE))
    cancelled = stack.client.post(f"/api/v1/tasks/{task_id}/cancel", headers=writer)
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["cancelled_by"] == "wanda" and body["cancelled_at"]
    assert body["error"].startswith("Cancelled by wanda")
    assert body["error"].endswith(", before it started: nothing of it was done.")
    assert body["started_at"] is None  # it never started: nobody reads it as half done
    assert body["waiting"] is None
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=_agent(stack)).status_code == 204


def test_an_ended_task_cannot_be_cancelled_and_read_only_users_cancel_nothing(stack: Stack) -> None:
    task_id = _deploy(stack)
    reader = stack.headers(stack.make_user("rita", Role.READ_ONLY))
    refused = stack.client.post(f"/api/v1/tasks/{task_id}/cancel", headers=reader)
    assert refused.status_code == 403
    admin = stack.headers(stack.token_for("admin"))
    assert stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()["status"] == "pending"
    assert stack.client.post(f"/api/v1/tasks/{task_id}/cancel", headers=admin).status_code == 200
    again = stack.client.post(f"/api/v1/tasks/{task_id}/cancel", headers=admin)
    assert again.status_code == 409
    assert f"Task {task_id} already ended as cancelled" in again.json()["message"]
    assert stack.client.post("/api/v1/tasks/999999/cancel", headers=admin).status_code == 404


def test_cancelling_a_running_task_ends_it_its_steps_and_children_and_tells_its_agent(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    create = _claim(stack, agent)
    stack.client.post(f"/api/v1/agent/tasks/{create['task']['id']}/end", json={}, headers=agent)
    admin = stack.headers(stack.token_for("admin"))
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0.0"}, headers=admin
    ).json()["task"]["id"]
    claim = _claim(stack, agent)
    hook = stack.client.post(
        f"/api/v1/agent/tasks/{upgrade}/steps",
        json={"name": hook_step_name(Hook.UPGRADE, Mode.CORE)},
        headers=agent,
    ).json()
    actions = stack.headers(claim["actions_token"])
    child = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": hook["id"]},
        headers=actions,
    )
    assert child.status_code == 202, child.text
    child_id = child.json()["task"]["id"]

    cancelled = stack.client.post(f"/api/v1/tasks/{upgrade}/cancel", headers=admin)
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["cancelled_by"] == "admin"
    assert body["steps"][0]["status"] == "cancelled"
    started = body["steps"][0]["started_tasks"]
    assert [(t["id"], t["status"]) for t in started] == [(child_id, "cancelled")]
    child_task = stack.client.get(f"/api/v1/tasks/{child_id}", headers=admin).json()
    assert child_task["error"] == CANCELLED_WITH_PARENT.format(parent=upgrade, by="admin")
    # The actions token is revoked; the agent hears "cancelled" (410), apart from a lost task's 409.
    assert stack.client.get("/api/v1/whoami", headers=actions).status_code == 401
    renewal = stack.client.post(
        f"/api/v1/agent/tasks/{upgrade}/lease", json={"lease_seconds": 60}, headers=agent
    )
    assert renewal.status_code == 410 and "was cancelled by admin" in renewal.json()["message"]
    step = stack.client.post(f"/api/v1/agent/tasks/{upgrade}/steps", json={"name": "More"}, headers=agent)
    assert step.status_code == 410
    assert stack.client.get(f"/api/v1/tasks/{upgrade}", headers=admin).json()["stopped_at"] is None
    # Its end, once the reconciliation stopped, changes nothing but notes that the work stopped.
    end = stack.client.post(f"/api/v1/agent/tasks/{upgrade}/end", json={}, headers=agent)
    assert end.status_code == 200 and end.json()["status"] == "cancelled"
    assert stack.client.get(f"/api/v1/tasks/{upgrade}", headers=admin).json()["stopped_at"] is not None
    deployment = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    assert deployment["status"] == "upgrade-failed" and "was cancelled" in deployment["status_reason"]

    # A cancelled task is retried like a failed one.
    retried = stack.client.post(f"/api/v1/tasks/{upgrade}/retry", headers=admin)
    assert retried.status_code == 202, retried.text
    assert retried.json()["task"]["type"] == "upgrade"


def test_a_flow_run_cancelled_in_the_prefect_ui_cancels_its_task(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    task_id = _claim(stack, agent)["task"]["id"]
    stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Run the setup pre-hook"}, headers=agent
    )
    flow_run = "0b8a4c5e-2f7a-4a55-9d43-3cbe2d5f1e10"
    answer = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/cancelled-in-prefect", json={"flow_run_id": flow_run}, headers=agent
    )
    assert answer.status_code == 200, answer.text
    admin = stack.headers(stack.token_for("admin"))
    task = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()
    assert task["status"] == "cancelled" and task["cancelled_by"] == f"the Prefect UI (flow run {flow_run})"
    assert task["steps"][0]["status"] == "cancelled"


def test_cancelling_a_task_an_action_started_leaves_its_parent_running(stack: Stack) -> None:
    _deploy(stack)
    agent = _agent(stack)
    claim = _claim(stack, agent)
    parent = claim["task"]["id"]
    hook = stack.client.post(
        f"/api/v1/agent/tasks/{parent}/steps", json={"name": "Run the setup post-hook"}, headers=agent
    ).json()
    child = stack.client.post(
        "/api/v1/deployments/shop/stop",
        json={"components": ["task-worker"], "started_by_step": hook["id"]},
        headers=stack.headers(claim["actions_token"]),
    ).json()["task"]["id"]
    admin = stack.headers(stack.token_for("admin"))
    assert stack.client.post(f"/api/v1/tasks/{child}/cancel", headers=admin).status_code == 200
    assert stack.client.get(f"/api/v1/tasks/{child}", headers=admin).json()["status"] == "cancelled"
    # The parent's action learns it from the child's status (its primitive then fails the step).
    assert stack.client.get(f"/api/v1/tasks/{parent}", headers=admin).json()["status"] == "running"
    renewal = stack.client.post(
        f"/api/v1/agent/tasks/{parent}/lease", json={"lease_seconds": 60}, headers=agent
    )
    assert renewal.status_code == 200


WITH_LOCK = {"plan_version": PLAN_VERSION, "helm_lock_lease_seconds": 30}


def _claim_with_lock(stack: Stack, agent: dict[str, str]) -> dict[str, Any]:
    claim = stack.client.post("/api/v1/agent/claim", json=WITH_LOCK, headers=agent)
    assert claim.status_code == 200, claim.text
    body: dict[str, Any] = claim.json()
    return body


def test_a_claim_takes_the_helm_lock_for_a_first_step_that_is_a_helm_operation_when_it_is_free(
    stack: Stack, tmp_path: Path
) -> None:
    create = _deploy(stack)
    one, two = _agent(stack, "one"), _agent(stack, "two")
    admin = stack.headers(stack.token_for("admin"))
    claimed = _claim_with_lock(stack, one)
    # The create's first step is the Helm install: the claim took the release's lock for it.
    assert claimed["task"]["id"] == create and claimed["first_step"]["name"] == INSTALL_STEP
    namespace = claimed["deployment"]["namespace"]
    assert claimed["helm_lock"] == {"namespace": namespace, "release": "shop"}
    assert _lock(stack, one, create, "/renew").status_code == 204  # held by the create: renewed

    # A change claimed while the lock is held gets none, and its step says which task it waits for.
    configure = stack.client.put(
        "/api/v1/deployments/shop/configuration", json={"values": {"a": 1}}, headers=admin
    ).json()["task"]["id"]
    second = _claim_with_lock(stack, two)
    assert second["task"]["id"] == configure and second["helm_lock"] is None
    waiting = stack.client.get(f"/api/v1/tasks/{configure}", headers=admin).json()["waiting"]
    assert waiting["reason"] == "helm-operation" and waiting["task_id"] == create

    # The create's end lets go of it; the waiting change takes it then.
    ended = stack.client.post(
        f"/api/v1/agent/tasks/{create}/end",
        json={"last_step_id": claimed["first_step"]["id"], "release_helm_locks": True},
        headers=one,
    )
    assert ended.status_code == 200, ended.text
    assert _lock(stack, two, configure).json() == {"acquired": True, "holder_task_id": configure}
    ended = stack.client.post(
        f"/api/v1/agent/tasks/{configure}/end",
        json={"last_step_id": second["first_step"]["id"], "release_helm_locks": True},
        headers=two,
    )
    assert ended.status_code == 200, ended.text

    # An upgrade whose first step runs the driver's actions takes no lock with its claim.
    with_actions = read_driver(driver_folder(tmp_path / "shop", version="2.0.0", with_actions=True))
    with stack.session() as session:
        drivers.push_driver(session, with_actions, DriverReport(), pushed_by="admin")
    upgrade = stack.client.post(
        "/api/v1/deployments/shop/upgrade",
        json={"app_version": "2.0.0", "driver_version": "2.0.0"},
        headers=admin,
    ).json()["task"]["id"]
    third = _claim_with_lock(stack, one)
    assert third["task"]["id"] == upgrade
    assert third["first_step"]["name"] == hook_step_name(Hook.UPGRADE, Mode.CORE)
    assert third["helm_lock"] is None
    with stack.session() as session:
        assert session.query(HelmLockRow).count() == 0


def test_a_claim_without_the_lease_or_the_plan_version_takes_no_helm_lock(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    for name in ("a", "b"):
        stack.client.post("/api/v1/deployments", json={**CREATE, "name": name}, headers=admin)
    agent = _agent(stack)
    for body in ({"plan_version": PLAN_VERSION}, {"helm_lock_lease_seconds": 30}):
        claim = stack.client.post("/api/v1/agent/claim", json=body, headers=agent).json()
        assert claim["helm_lock"] is None
    with stack.session() as session:
        assert session.query(HelmLockRow).count() == 0
    for bad in ("30", 4, 3601):
        refused = stack.client.post(
            "/api/v1/agent/claim", json={**WITH_LOCK, "helm_lock_lease_seconds": bad}, headers=agent
        )
        assert refused.status_code == 422 and "helm_lock_lease_seconds" in refused.text, refused.text
