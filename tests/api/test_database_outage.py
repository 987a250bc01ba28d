"""While the database cannot be reached, every route answers 503 naming it, and nothing changes.

The database is made unreachable for real: the app's sessions are pointed at a PostgreSQL port where
nothing listens (connections are refused, as when PostgreSQL is stopped), then back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI

from styrmin_backend.services import agents
from styrmin_backend.store.db import make_engine, make_session_factory
from tests.api.conftest import ADMIN_PASSWORD, Stack
from tests.support.loopback import free_port
from tests.web.conftest import login_client


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


def test_a_page_while_the_database_is_away_says_so_with_503(stack: Stack) -> None:
    login_client(stack.client, "admin", ADMIN_PASSWORD)
    with database_away(stack):
        page = stack.client.get("/deployments")
    assert page.status_code == 503
    assert page.headers["Retry-After"].isdigit()
    assert "Styrmin cannot serve now" in page.text and "database cannot be reached" in page.text
