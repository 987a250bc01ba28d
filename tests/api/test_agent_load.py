"""Agent calls under the load of many running tasks: a lease renewal never fails because others are busy.

With 20 tasks running, their actions polling their child tasks and the agent long-polling for
more, lease renewals and step writes used to wait 30 s for the database and fail with 500 (SQLite:
"database is locked", or no free connection), so healthy tasks ended as "the agent stopped".
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from styrmin_backend.api.serving import server_config
from styrmin_backend.server_app import create_app
from styrmin_backend.store.db import make_engine

from .conftest import Stack

pytestmark = pytest.mark.slow

CREATE_BODY = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
DATABASE_WAIT_SECONDS = 8
"""How long the served app's requests wait for the database (SQLite's write lock, a pooled
connection) before they fail: 30 s in production; shorter here, so that a shorter load proves the same."""
LOAD_SECONDS = 20
"""Over twice the database wait: a request starved of the database fails within the load."""


@pytest.fixture
def server_url(stack: Stack, database_url: str) -> Iterator[str]:
    """The app served by uvicorn on loopback, so requests really run at the same time; its requests
    wait at most ``DATABASE_WAIT_SECONDS`` for the database."""
    engine = make_engine(database_url, wait_seconds=DATABASE_WAIT_SECONDS)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = stack.settings.model_copy(update={"host": "127.0.0.1", "port": port, "log_level": "WARNING"})
    server = uvicorn.Server(server_config(create_app(settings, engine), settings, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)
    engine.dispose()


def test_lease_renewals_and_step_writes_all_succeed_under_load(stack: Stack, server_url: str) -> None:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    agent = stack.headers(
        stack.client.post("/api/v1/agents", json={"name": "busy", "cluster": "local"}, headers=admin).json()[
            "key"
        ]
    )
    answers: collections.Counter[tuple[str, int | str]] = collections.Counter()

    async def load() -> None:
        async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
            for i in range(20):
                body = {**CREATE_BODY, "name": f"d{i}", "namespace": f"d{i}"}
                assert (await http.post("/api/v1/deployments", json=body, headers=admin)).status_code == 202
            held = []
            for _ in range(20):
                claimed = await http.post("/api/v1/agent/claim", json={"lease_seconds": 60}, headers=agent)
                held.append(claimed.json()["task"]["id"])
            end = time.monotonic() + LOAD_SECONDS

            async def call(kind: str, method: str, path: str, **options: object) -> httpx.Response | None:
                try:
                    response = await http.request(method, path, **options)  # type: ignore[arg-type]
                except httpx.HTTPError as error:
                    answers[(kind, type(error).__name__)] += 1
                    return None
                answers[(kind, response.status_code)] += 1
                return response

            async def renew(task_id: int) -> None:
                while time.monotonic() < end:
                    await call(
                        "renew",
                        "POST",
                        f"/api/v1/agent/tasks/{task_id}/lease",
                        json={"lease_seconds": 60},
                        headers=agent,
                    )
                    await asyncio.sleep(1)

            async def poll(task_id: int) -> None:  # as an action's primitive waits for its task
                while time.monotonic() < end:
                    await call("read", "GET", f"/api/v1/tasks/{task_id}", headers=admin)
                    await asyncio.sleep(0.5)

            async def write_steps(task_id: int) -> None:
                while time.monotonic() < end:
                    step = await call(
                        "step",
                        "POST",
                        f"/api/v1/agent/tasks/{task_id}/steps",
                        json={"name": "Install"},
                        headers=agent,
                    )
                    if step is not None and step.status_code == 201:
                        await call(
                            "step",
                            "POST",
                            f"/api/v1/agent/steps/{step.json()['id']}/end",
                            json={},
                            headers=agent,
                        )
                    await asyncio.sleep(2)

            async def long_poll() -> None:  # an agent whose slots are full waits for child tasks
                while time.monotonic() < end:
                    body = {"lease_seconds": 60, "wait_seconds": 5, "started_by_actions_only": True}
                    await call("claim", "POST", "/api/v1/agent/claim", json=body, headers=agent)

            await asyncio.gather(
                *(renew(t) for t in held),
                *(poll(t) for t in held + held),
                *(write_steps(t) for t in held),
                *(long_poll() for _ in range(8)),
            )

    asyncio.run(load())
    failed = {key: count for key, count in answers.items() if key[1] not in (200, 201, 204)}
    assert not failed, f"calls that failed under load: {failed}; all answers: {dict(answers)}"
    assert answers[("renew", 200)] >= 20
