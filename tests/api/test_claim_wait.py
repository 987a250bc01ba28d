"""An agent's waiting claim (long poll) gets a new task at once, from any server on the database, and on
PostgreSQL waits without querying the database (LISTEN/NOTIFY) instead of looking every few milliseconds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text

from styrmin_backend.api.serving import announce_stop
from styrmin_backend.server_app import create_app
from styrmin_backend.store.db import make_engine
from styrmin_backend.store.wakeups import CLAIMABLE_CHANNEL
from tests.support.processes import python_prints

from .conftest import Stack

CREATE = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
LONG_WAIT = 30
"""The longest wait a claim may ask for; every answer below comes long before it."""


def _agent_key(stack: Stack) -> dict[str, str]:
    admin = stack.headers(stack.token_for("admin"))
    made = stack.client.post("/api/v1/agents", json={"name": "waiter", "cluster": "local"}, headers=admin)
    assert made.status_code == 201, made.text
    return stack.headers(made.json()["key"])


class _WaitingClaim:
    """A claim with the longest wait, sent from a thread; its answer and how long it took."""

    def __init__(self, client: TestClient, agent: dict[str, str], wait_seconds: float = LONG_WAIT) -> None:
        self.answer: httpx.Response | None = None
        self.seconds = 0.0

        def send() -> None:
            started = time.monotonic()
            self.answer = client.post(
                "/api/v1/agent/claim", json={"wait_seconds": wait_seconds}, headers=agent
            )
            self.seconds = time.monotonic() - started

        self._thread = threading.Thread(target=send)
        self._thread.start()

    def result(self) -> tuple[httpx.Response, float]:
        self._thread.join(LONG_WAIT * 3)
        assert self.answer is not None
        return self.answer, self.seconds


def _waiting(client: TestClient, cluster: str = "local") -> None:
    """Return once a claim of ``cluster`` waits on ``client``'s server."""
    wakeups = client.app.state.claim_wakeups  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while not wakeups.waiting(cluster):  # it waits for a commit of this process, or a NOTIFY
        assert time.monotonic() < deadline, "the claim never waited"
        time.sleep(0.02)


@contextmanager
def _second_server(stack: Stack) -> Iterator[TestClient]:
    """Another server process's app on the same database (its own engine and listening connection)."""
    engine = make_engine(stack.engine.url.render_as_string(hide_password=False))
    try:
        with TestClient(create_app(stack.settings, engine), raise_server_exceptions=False) as client:
            yield client
    finally:
        engine.dispose()


@contextmanager
def _counting_agent_lookups(engine: Engine) -> Iterator[Callable[[], int]]:
    """Count the claims' lookups of the agent key: one per time a claim looks for a task."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM agents" in statement and "key_hash" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield lambda: len(seen)
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_change_requested_on_another_server_reaches_a_claim_waiting_on_this_one(stack: Stack) -> None:
    stack.add_driver()
    agent = _agent_key(stack)
    with _second_server(stack) as other:
        admin = stack.headers(stack.token_for("admin"))
        claim = _WaitingClaim(stack.client, agent)
        _waiting(stack.client)
        if stack.engine.dialect.name == "postgresql":
            assert stack.client.app.state.claim_wakeups.waiting("local") == 1  # type: ignore[attr-defined]
        created = other.post("/api/v1/deployments", json=CREATE, headers=admin)
        assert created.status_code == 202, created.text
        answer, seconds = claim.result()
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"]["id"] == created.json()["task"]["id"]
    assert seconds < LONG_WAIT / 2, "the claim waited out its time instead of being woken"


def test_a_waiting_claim_gets_another_change_of_a_deployment_whose_change_runs(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    create = stack.client.post("/api/v1/deployments", json=CREATE, headers=admin).json()["task"]["id"]
    agent = _agent_key(stack)
    assert stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()["task"]["id"] == create
    claim = _WaitingClaim(stack.client, agent)
    _waiting(stack.client)
    configure = stack.client.put(
        "/api/v1/deployments/shop/configuration", json={"values": {"a": 1}}, headers=admin
    ).json()["task"]["id"]
    answer, seconds = claim.result()
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"]["id"] == configure  # its own workflow, while the create still runs
    assert seconds < LONG_WAIT / 2, "the claim waited out its time instead of being woken"


def test_a_stopping_server_answers_waiting_claims_at_once(stack: Stack) -> None:
    agent = _agent_key(stack)
    claim = _WaitingClaim(stack.client, agent)
    _waiting(stack.client)
    announce_stop(stack.client.app)  # type: ignore[arg-type]
    answer, seconds = claim.result()
    assert answer.status_code == 204
    assert seconds < LONG_WAIT / 2


def _listening(wakeups: Any, stack: Stack) -> None:
    """Return once a mark can be taken that no later wake-up of the listener's start moves: on
    PostgreSQL the first mark starts listening, and its connect wakes every claim once."""
    wakeups.mark()
    deadline = time.monotonic() + 60
    while stack.engine.dialect.name == "postgresql" and not wakeups.listening:
        assert time.monotonic() < deadline, "the server never listened"
        time.sleep(0.01)


def test_a_change_committed_in_this_server_wakes_its_claims_without_waiting_for_a_poll(stack: Stack) -> None:
    # On SQLite nothing else could wake them: without the commit's wake-up the mark stays as it was.
    stack.add_driver()
    wakeups = stack.client.app.state.claim_wakeups  # type: ignore[attr-defined]
    admin = stack.headers(stack.token_for("admin"))
    _listening(wakeups, stack)
    before = wakeups.mark()
    refused = stack.client.post(
        "/api/v1/deployments", json={**CREATE, "driver_version": "9.9.9"}, headers=admin
    )
    assert refused.status_code >= 400
    assert wakeups.mark().of("local") == before.of("local"), "a refused request woke the claims"
    created = stack.client.post("/api/v1/deployments", json=CREATE, headers=admin)
    assert created.status_code == 202, created.text
    deadline = time.monotonic() + 60  # on PostgreSQL the NOTIFY may come too; either way, now
    while wakeups.mark().of("local") == before.of("local"):
        assert time.monotonic() < deadline, "the commit of a new change woke no claim of its cluster"
        time.sleep(0.01)


def test_a_task_ending_wakes_no_claim(stack: Stack) -> None:
    # A pending change never waits for the one before it, and the agent that ran a task claims again
    # by itself: an end that woke the waiting claims only made each look at the tasks for nothing.
    stack.add_driver()
    agent = _agent_key(stack)
    wakeups = stack.client.app.state.claim_wakeups  # type: ignore[attr-defined]
    admin = stack.headers(stack.token_for("admin"))
    _listening(wakeups, stack)
    seen = wakeups.mark()
    assert stack.client.post("/api/v1/deployments", json=CREATE, headers=admin).status_code == 202
    deadline = time.monotonic() + 60  # on PostgreSQL the NOTIFY of the new task may come later
    while wakeups.mark().of("local") == seen.of("local"):
        assert time.monotonic() < deadline, "the new change woke no claim"
        time.sleep(0.01)
    claimed = stack.client.post("/api/v1/agent/claim", json={}, headers=agent).json()
    time.sleep(0.5)  # the insert's NOTIFY, if it comes twice, comes now
    before = wakeups.mark()

    ended = stack.client.post(f"/api/v1/agent/tasks/{claimed['task']['id']}/end", json={}, headers=agent)

    assert ended.status_code == 200, ended.text
    time.sleep(0.5)
    assert wakeups.mark().of("local") == before.of("local"), "a task's end woke the claims"


@pytest.fixture
def postgres_stack(stack: Stack) -> Stack:
    if stack.engine.dialect.name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; on SQLite only this process writes the tasks")
    return stack


def test_an_idle_claim_on_postgresql_looks_for_tasks_only_when_woken(postgres_stack: Stack) -> None:
    stack = postgres_stack
    agent = _agent_key(stack)
    stack.client.post("/api/v1/agent/claim", json={}, headers=agent)  # starts the listening connection
    wakeups = stack.client.app.state.claim_wakeups  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while not wakeups.listening:
        assert time.monotonic() < deadline, "the server never listened for new tasks"
        time.sleep(0.05)
    with _counting_agent_lookups(stack.engine) as lookups:
        answer = stack.client.post("/api/v1/agent/claim", json={"wait_seconds": 1}, headers=agent)
        assert answer.status_code == 204
    # Once when it arrives, once when its wait ends (polling every 50 ms would look about 20 times).
    assert lookups() <= 3


def test_a_claim_still_gets_new_tasks_after_the_listening_connection_is_cut(
    postgres_stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    stack = postgres_stack
    stack.add_driver()
    agent = _agent_key(stack)
    stack.client.post("/api/v1/agent/claim", json={}, headers=agent)
    wakeups = stack.client.app.state.claim_wakeups  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while not wakeups.listening:
        assert time.monotonic() < deadline, "the server never listened for new tasks"
        time.sleep(0.05)
    with stack.engine.connect() as connection:
        cut = connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                "  WHERE query = :listen AND datname = current_database()"
            ),
            {"listen": f"LISTEN {CLAIMABLE_CHANNEL}"},
        ).all()
    assert cut == [(True,)]
    claim = _WaitingClaim(stack.client, agent)
    time.sleep(0.5)
    admin = stack.headers(stack.token_for("admin"))
    created = stack.client.post("/api/v1/deployments", json=CREATE, headers=admin)
    assert created.status_code == 202, created.text
    answer, seconds = claim.result()
    assert answer.status_code == 200, answer.text
    assert seconds < LONG_WAIT / 2
    deadline = time.monotonic() + 60
    while not wakeups.listening:  # it listens again
        assert time.monotonic() < deadline, "the server did not listen again"
        time.sleep(0.1)
    # The cut is said once as a warning; closing the ended connection logs no error (it did: the
    # pool's handle rolled back on a connection the database had ended).
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == []
    assert any("Not listening for new tasks" in record.getMessage() for record in caplog.records)


def test_a_server_on_sqlite_never_loads_postgresqls_driver(tmp_path: Path) -> None:
    """psycopg and its libraries (about 20 MB) load only where claims listen on PostgreSQL."""
    database = f"sqlite:///{tmp_path / 'styrmin.db'}"
    check = (
        "import sys\n"
        "import styrmin_backend.cli, styrmin_backend.local, styrmin_backend.agent.wiring\n"
        "from styrmin_backend.store.claim_wakeups import ClaimWakeups\n"
        "from styrmin_backend.store.db import make_engine\n"
        f"wakeups = ClaimWakeups(make_engine({database!r}))\n"
        "wakeups.mark()  # what starts the listening on PostgreSQL\n"
        "print('psycopg' in sys.modules)\n"
    )
    assert python_prints(check).split() == ["False"]
