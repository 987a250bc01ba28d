"""While the database cannot be reached, every route answers 503 naming it, and nothing changes.

The database is made unreachable for real: the app's sessions are pointed at a PostgreSQL port where
nothing listens (connections are refused, as when PostgreSQL is stopped), then back.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import update

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.outages import LEASE_GRACE_AFTER_OUTAGE
from styrmin_backend.server_app import create_app
from styrmin_backend.services import agents
from styrmin_backend.store.db import make_engine, make_session_factory, outages_of
from styrmin_backend.store.models import TaskRow
from tests.api.conftest import ADMIN_PASSWORD, Stack
from tests.support.loopback import free_port
from tests.web.conftest import login_client


@pytest.fixture(autouse=True)
def _outages_forgotten(stack: Stack) -> Iterator[None]:
    """What a test's outage left in its engine's memory must not change how later tests' leases end."""
    yield
    outages_of(stack.engine).clear()


@contextmanager
def database_away(stack: Stack) -> Iterator[None]:
    """The app's database is unreachable inside the block."""
    app: FastAPI = stack.client.app  # type: ignore[assignment]
    kept = app.state.engine, app.state.session_factory
    dead = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/styrmin", wait_seconds=2)
    app.state.engine, app.state.session_factory = dead, make_session_factory(dead)
    try:
        yield
    finally:
        app.state.engine, app.state.session_factory = kept
        dead.dispose()


def test_a_request_while_the_database_is_away_gets_503_naming_it_and_changes_nothing(stack: Stack) -> None:
    headers = stack.headers(stack.token_for("admin"))
    stack.add_driver()
    body = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
    with database_away(stack):
        read = stack.client.get("/api/v1/deployments", headers=headers)
        write = stack.client.post("/api/v1/deployments", json=body, headers=headers)
    for answer in (read, write):
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"].isdigit()
        message = answer.json()["message"]
        assert "database cannot be reached since" in message and "nothing was changed" in message
    assert stack.client.get("/api/v1/deployments", headers=headers).json() == []


def test_no_route_of_the_api_answers_500_while_the_database_is_away(stack: Stack) -> None:
    headers = stack.headers(stack.token_for("admin"))
    spec = stack.client.get("/api/openapi.json").json()
    answers: dict[str, int] = {}
    with database_away(stack):
        for template, operations in spec["paths"].items():
            path = re.sub(r"\{[^}]+\}", "1", template)
            for method in operations:
                answer = stack.client.request(method.upper(), path, headers=headers, json={})
                answers[f"{method.upper()} {template}"] = answer.status_code
    assert [route for route, status in answers.items() if status >= 500 and status != 503] == []
    assert answers["GET /api/v1/deployments"] == 503


def test_an_agent_claim_while_the_database_is_away_gets_503(stack: Stack) -> None:
    with stack.session() as session:
        _agent, key = agents.create_agent(session, "agent-1", "local")
    with database_away(stack):
        answer = stack.client.post(
            "/api/v1/agent/claim", json={"lease_seconds": 30}, headers=stack.headers(key)
        )
    assert answer.status_code == 503 and "database" in answer.json()["message"]


def test_a_page_while_the_database_is_away_says_so_with_503(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    login_client(stack.client, "admin", ADMIN_PASSWORD)
    with caplog.at_level(logging.WARNING, logger="styrmin.database"), database_away(stack):
        page = stack.client.get("/deployments")
    assert page.status_code == 503
    assert page.headers["Retry-After"].isdigit()
    assert "Styrmin cannot serve now" in page.text and "database cannot be reached" in page.text
    # The server's log says once what the database driver said, and never the statement it ran.
    logged = [r.getMessage() for r in caplog.records if r.name == "styrmin.database"]
    assert len(logged) == 1 and "OperationalError: " in logged[0], logged
    assert "SELECT" not in logged[0] and "[SQL:" not in logged[0]


def _claimed_task(stack: Stack) -> tuple[dict[str, str], int]:
    """A create of deployment "shop" claimed by an agent with a 5 s lease: its headers and the task."""
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    stack.client.post(
        "/api/v1/deployments",
        json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
        headers=admin,
    )
    with stack.session() as session:
        _agent, key = agents.create_agent(session, "agent-1", "local")
    agent = stack.headers(key)
    claim = stack.client.post("/api/v1/agent/claim", json={"lease_seconds": 5}, headers=agent).json()
    return agent, int(claim["task"]["id"])


def _lease_ran_out(stack: Stack, ago: timedelta) -> None:
    with stack.session() as session:
        session.execute(update(TaskRow).values(lease_expires_at=utcnow() - ago))


def _task(stack: Stack, task_id: int) -> dict[str, Any]:
    admin = stack.headers(stack.token_for("admin"))
    answer: dict[str, Any] = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()
    return answer


def test_a_lease_that_ran_out_during_a_database_outage_can_be_renewed_once_it_is_back(stack: Stack) -> None:
    agent, task_id = _claimed_task(stack)
    with database_away(stack):
        assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 503
    outages_of(stack.engine).record_failure()  # this server saw the outage through its own engine
    _lease_ran_out(stack, timedelta(seconds=3))
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 204
    assert _task(stack, task_id)["status"] == "running"
    renewed = stack.client.post(
        f"/api/v1/agent/tasks/{task_id}/lease", json={"lease_seconds": 30}, headers=agent
    )
    assert renewed.status_code == 200, renewed.text


def test_a_lease_not_renewed_after_an_outage_ends_the_task_naming_the_outage(stack: Stack) -> None:
    agent, task_id = _claimed_task(stack)
    now = utcnow()
    outages = outages_of(stack.engine)
    outages.record_failure(at=now - timedelta(seconds=100))
    outages.record_failure(at=now - LEASE_GRACE_AFTER_OUTAGE - timedelta(seconds=60))
    _lease_ran_out(stack, LEASE_GRACE_AFTER_OUTAGE + timedelta(seconds=70))
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 204
    task = _task(stack, task_id)
    assert task["status"] == "failed"
    assert task["error"].startswith("The agent did not renew this task's lease")
    assert "the database was away from" in task["error"]


def test_the_agents_own_error_replaces_a_lease_expiry_that_came_first(stack: Stack) -> None:
    agent, task_id = _claimed_task(stack)
    _lease_ran_out(stack, timedelta(seconds=1))
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).status_code == 204
    error = "Styrmin at http://127.0.0.1:1 could not reach its database from 10:00:00 to 10:01:00."
    ended = stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={"error": error}, headers=agent)
    assert ended.status_code == 200, ended.text
    assert _task(stack, task_id)["error"] == error


def test_a_step_or_end_sent_again_is_recorded_once(stack: Stack) -> None:
    agent, task_id = _claimed_task(stack)
    steps = [
        stack.client.post(f"/api/v1/agent/tasks/{task_id}/steps", json={"name": "Install"}, headers=agent)
        for _ in range(2)
    ]
    assert [s.status_code for s in steps] == [201, 201] and steps[0].json()["id"] == steps[1].json()["id"]
    step_id = steps[0].json()["id"]
    for _ in range(2):
        note = stack.client.post(
            f"/api/v1/agent/steps/{step_id}/notes", json={"note": "Job x deleted."}, headers=agent
        )
        assert note.status_code == 200
        end = stack.client.post(f"/api/v1/agent/steps/{step_id}/end", json={}, headers=agent)
        assert end.status_code == 200, end.text
    for _ in range(2):
        assert (
            stack.client.post(f"/api/v1/agent/tasks/{task_id}/end", json={}, headers=agent).status_code == 200
        )
    task = _task(stack, task_id)
    assert task["status"] == "succeeded"
    assert [(s["name"], s["notes"]) for s in task["steps"]] == [("Install", ["Job x deleted."])]


def test_the_backup_schedules_wait_out_an_outage_without_a_traceback_each_period(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(stack.settings.model_copy(update={"schedule_seconds": 0.05}), stack.engine)
    dead = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/styrmin", wait_seconds=2)
    try:
        with caplog.at_level(logging.DEBUG, logger="styrmin.schedules"), TestClient(app):
            app.state.session_factory = make_session_factory(dead)
            deadline = time.monotonic() + 60
            while sum("wait for the database" in r.getMessage() for r in caplog.records) < 3:
                assert time.monotonic() < deadline, "the schedules never ran while the database was away"
                time.sleep(0.05)
    finally:
        dead.dispose()
        outages_of(dead).clear()

    schedules = [r for r in caplog.records if r.name == "styrmin.schedules"]
    assert all(r.exc_info is None and r.levelno < logging.WARNING for r in schedules), [
        r.getMessage() for r in schedules
    ]
