"""The agent's client of the servers: it uses whichever server answers, holds a step while none can
serve it, and gives up after its retry time naming what was away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

import pytest
from starlette.responses import JSONResponse

from styrmin_backend.agent.server_api import ServerApi, StyrminAway, parse_server_urls
from styrmin_backend.domain.steps import INSTALL_STEP
from styrmin_backend.protocol import Claim
from styrmin_backend.services import agents
from styrmin_backend.store.db import outages_of
from tests.api.conftest import Stack
from tests.api.test_database_outage import database_away
from tests.support.loopback import free_port, served


@pytest.fixture(autouse=True)
def _outages_forgotten(stack: Stack) -> object:
    yield
    outages_of(stack.engine).clear()


def _agent_key(stack: Stack) -> str:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    stack.client.post(
        "/api/v1/deployments",
        json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
        headers=admin,
    )
    with stack.session() as session:
        return agents.create_agent(session, "agent-1", "local")[1]


def test_several_server_urls_are_read_from_one_comma_separated_setting() -> None:
    assert parse_server_urls(" http://a:8080/, https://b ") == ["http://a:8080", "https://b"]
    with pytest.raises(ValueError, match='"b:8080" is not an http'):
        parse_server_urls("http://a:8080,b:8080")


def test_the_agent_claims_through_the_server_that_answers_and_logs_which(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    key = _agent_key(stack)
    dead = f"http://127.0.0.1:{free_port()}"

    async def claim(url: str) -> int | None:
        api = ServerApi([dead, url], key, retry_seconds=5)
        try:
            claimed = await api.claim(30)
            return None if claimed is None else claimed.task_id
        finally:
            await api.close()

    with served(stack.client.app) as url, caplog.at_level(logging.INFO, logger="styrmin.agent"):
        assert asyncio.run(claim(url)) is not None
    assert f"Claiming from and reporting to the Styrmin server at {url}" in caplog.text


def test_a_step_waits_while_the_database_is_away_and_its_notes_say_so(stack: Stack) -> None:
    key = _agent_key(stack)
    released = threading.Event()

    async def run(url: str) -> int:
        api = ServerApi(url, key, retry_seconds=120)
        try:
            claimed = await api.claim(60)
            assert claimed is not None
            with database_away(stack):
                # The step the server started with the claim, started again: held, then answered.
                starting = asyncio.ensure_future(api.add_step(claimed.task_id, INSTALL_STEP))
                await asyncio.sleep(2)
                assert not starting.done()  # held: the step is not recorded, its actions do not start
            released.set()
            step_id = await starting
            await api.end_step(step_id, None)
            return claimed.task_id
        finally:
            await api.close()

    with served(stack.client.app) as url:
        task_id = asyncio.run(run(url))
    admin = stack.headers(stack.token_for("admin"))
    steps = stack.client.get(f"/api/v1/tasks/{task_id}", headers=admin).json()["steps"]
    assert [s["name"] for s in steps] == [INSTALL_STEP] and steps[0]["status"] == "succeeded"
    assert steps[0]["notes"][0].startswith(
        "The agent held this step until Styrmin could serve it again, from "
    )


def test_a_step_gives_up_after_the_retry_time_naming_the_database(stack: Stack) -> None:
    key = _agent_key(stack)

    async def run(url: str) -> str:
        api = ServerApi(url, key, retry_seconds=2)
        try:
            claimed = await api.claim(60)
            assert claimed is not None
            with database_away(stack), pytest.raises(StyrminAway) as caught:
                await api.add_step(claimed.task_id, "Install")
            return str(caught.value)
        finally:
            await api.close()

    with served(stack.client.app) as url:
        message = asyncio.run(run(url))
    assert message.startswith("Styrmin could not serve the agent from ")
    assert "database cannot be reached" in message and url in message


def _refusing_plan_version(app: Any, claims: list[bytes], field: str = "plan_version") -> Any:
    """``app`` as a server older than ``field`` (``plan_version``) answers claims: the field refused
    (422), as its strict request model did. Each claim's body is recorded in ``claims``."""

    async def older(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/v1/agent/claim":
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        claims.append(body)
        if f'"{field}"'.encode() in body:
            refused = JSONResponse({"message": f"{field}: Extra inputs are not permitted"}, 422)
            await refused(scope, receive, send)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return dict(await receive())
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return older


def test_the_server_starts_a_claimed_tasks_first_step_for_the_agent(stack: Stack) -> None:
    key = _agent_key(stack)

    async def claim(url: str) -> Claim | None:
        api = ServerApi(url, key, retry_seconds=5)
        try:
            return await api.claim(30)
        finally:
            await api.close()

    with served(stack.client.app) as url:
        claimed = asyncio.run(claim(url))
    assert claimed is not None and claimed.first_step is not None
    assert claimed.first_step.name == INSTALL_STEP  # the example driver has no setup pre hook


async def _claim_twice(url: str, key: str) -> list[Claim | None]:
    """Two claims by one agent, as its loop sends them (the second finds nothing left)."""
    api = ServerApi(url, key, retry_seconds=5)
    try:
        return [await api.claim(30), await api.claim(30)]
    finally:
        await api.close()


def test_an_agent_claiming_from_a_server_older_than_plan_version_starts_the_steps_itself(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    key = _agent_key(stack)
    claims: list[bytes] = []

    with served(_refusing_plan_version(stack.client.app, claims)) as url, caplog.at_level(logging.INFO):
        first, second = asyncio.run(_claim_twice(url, key))
    assert first is not None and first.first_step is None and second is None  # one task, claimed once
    assert [b'"plan_version"' in body for body in claims] == [True, False, False]  # asked once only
    assert "does not start claimed tasks' first steps" in caplog.text


def test_an_agent_claiming_from_a_server_older_than_the_helm_lock_at_claim_takes_the_lock_itself(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    key = _agent_key(stack)
    claims: list[bytes] = []

    refusing = _refusing_plan_version(stack.client.app, claims, field="helm_lock_lease_seconds")
    with served(refusing) as url, caplog.at_level(logging.INFO):
        first, second = asyncio.run(_claim_twice(url, key))
    # The first step still starts with the claim; only the lock is left to the agent.
    assert first is not None and first.first_step is not None and first.helm_lock is None
    assert second is None
    assert [b'"helm_lock_lease_seconds"' in body for body in claims] == [True, False, False]
    assert all(b'"plan_version"' in body for body in claims)
    assert "takes no Helm lock with a claim" in caplog.text


def test_an_agent_claiming_from_a_server_older_than_instances_claims_without_its_instance(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    key = _agent_key(stack)
    claims: list[bytes] = []

    async def claim_twice(url: str) -> list[Claim | None]:
        api = ServerApi(url, key, retry_seconds=5, instance="styrmin-agent:0123456789ab")
        try:
            return [await api.claim(30), await api.claim(30)]
        finally:
            await api.close()

    refusing = _refusing_plan_version(stack.client.app, claims, field="instance")
    with served(refusing) as url, caplog.at_level(logging.INFO):
        first, second = asyncio.run(claim_twice(url))
    assert first is not None and second is None  # one task, claimed once
    assert [b'"instance"' in body for body in claims] == [True, False, False]  # asked once only
    assert "does not know agents' instances" in caplog.text


def test_the_agent_keeps_its_presence_connection_open_and_opens_it_again_when_a_server_stops(
    stack: Stack,
) -> None:
    """The agent's side of the presence connection (tests/api/test_agent_presence.py has the
    server's): open while it runs, opened again when the server that held it ends it."""
    from sqlalchemy import select

    from styrmin_backend.api.serving import announce_stop
    from styrmin_backend.server_app import create_app
    from styrmin_backend.store.models import AgentInstanceRow
    from tests.support.waiting import wait_for

    key = _agent_key(stack)
    instance = "styrmin-agent:0123456789ab"

    def connections() -> int:
        with stack.session() as session:
            return session.scalar(select(AgentInstanceRow.connection)) or 0

    app = create_app(stack.settings, stack.engine)
    with served(app) as url:
        loop = asyncio.new_event_loop()
        api = ServerApi(url, key, retry_seconds=5, instance=instance)
        present = loop.create_task(api.stay_present())

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(present)

        running = threading.Thread(target=run, daemon=True)
        running.start()
        try:
            wait_for(lambda: connections() == 1, timeout=60, message="the presence connection")
            announce_stop(app)  # ends it; the stopping server judges no one
            wait_for(lambda: connections() >= 2, timeout=60, message="the agent to connect again")
        finally:
            loop.call_soon_threadsafe(present.cancel)
            running.join(30)
            loop.run_until_complete(api.close())
            loop.close()
