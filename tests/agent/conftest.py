"""The whole stack on this machine: server on loopback, embedded local cluster, Prefect server, agent."""

from __future__ import annotations

import asyncio
import socket
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from lightkube import Client, KubeConfig
from pydantic import SecretStr

from styrmin_backend.agent.loop import Agent
from styrmin_backend.agent.prefect import LocalPrefectServer
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.drivers import pack_driver_folder
from styrmin_backend.services import agents
from styrmin_backend.store.db import make_engine, make_session_factory, transaction
from styrmin_localcluster import LocalCluster
from tests.api.conftest import ADMIN_PASSWORD, make_stack
from tests.conftest import fresh_database_url
from tests.support.drivers import EXAMPLE_DRIVER, driver_folder

TEST_ACTIONS = textwrap.dedent(
    """
    import sys

    from prefect import flow, get_run_logger

    from styrmin_backend.actions import GlobalContext


    @flow
    async def announce(context: GlobalContext) -> None:
        get_run_logger().info("%s %s-hook of %s", context.hook, context.mode, context.deployment_name)


    @flow
    async def checks_token(context: GlobalContext) -> None:
        import os
        from pathlib import Path

        import httpx

        token = os.environ["STYRMIN_TOKEN"]
        me = httpx.get(f"{context.api_url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        if me.json().get("username") != "styrmin-actions":
            raise RuntimeError(f"the token does not work during the run: {me.text}")
        Path(context.configuration.values["token_file"]).write_text(token)


    @flow
    async def sleeps(context: GlobalContext) -> None:
        import asyncio

        await asyncio.sleep(120)


    @flow
    async def fails(context: GlobalContext) -> None:
        raise RuntimeError("Migration 0042 failed: table users is locked")


    @flow
    def exits(context: GlobalContext) -> None:
        get_run_logger().error("Giving up: password=hunter2 is wrong")
        sys.exit(3)
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Stack:
    """A running Styrmin with its agent, and helpers to drive it as an operator would."""

    url: str
    http: httpx.Client
    kube: Client
    tmp: Path

    def push(self, version: str, actions: list[dict[str, Any]] | None = None) -> None:
        """Push the example driver at ``version`` with the test actions and ``actions`` declared."""
        folder = driver_folder(self.tmp / f"driver-{version}-{time.monotonic_ns()}", version=version)
        (folder / "actions.py").write_text(TEST_ACTIONS)
        spec_file = folder / "driver.styrmin.yml"
        spec = yaml.safe_load(spec_file.read_text())
        spec["spec"]["actions"] = actions or []
        spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
        response = self.http.post(
            "/api/v1/drivers",
            content=pack_driver_folder(folder),
            headers={"Content-Type": "application/gzip"},
        )
        assert response.status_code in (200, 201), response.text

    def wait(self, task_id: int, timeout: float = 180) -> dict[str, Any]:
        """The task once it has ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            task: dict[str, Any] = self.http.get(f"/api/v1/tasks/{task_id}").json()
            if task["status"] in ("succeeded", "failed"):
                return task
            time.sleep(0.2)
        raise AssertionError(
            f"task {task_id} did not end: {self.http.get(f'/api/v1/tasks/{task_id}').json()}"
        )


def action(name: str, hook: str, mode: str, function: str) -> dict[str, Any]:
    return {"name": name, "hook": hook, "mode": mode, "location": f"actions.py::{function}"}


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster"), [EXAMPLE_DRIVER / "catalog"]) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrefectServer]:
    server = LocalPrefectServer(tmp_path_factory.mktemp("prefect"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    migrated_templates: dict[str, str],
    local_cluster: LocalCluster,
    prefect_server: LocalPrefectServer,
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    url, _ = fresh_database_url("sqlite", migrated_templates, tmp)
    engine = make_engine(url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app_stack = make_stack(engine, tmp / "data")
    app_stack.client.app.state.settings.public_url = base  # type: ignore[attr-defined]
    server = uvicorn.Server(
        uvicorn.Config(app_stack.client.app, host="127.0.0.1", port=port, log_level="warning")
    )
    server_thread = threading.Thread(target=server.run, daemon=True)
    server_thread.start()
    while not server.started:
        time.sleep(0.05)
    with transaction(make_session_factory(engine)) as session:
        _, key = agents.create_agent(session, "local", "local")
    settings = AgentSettings(
        server_url=base,
        key=SecretStr(key),
        kubeconfig=local_cluster.kubeconfig_path,
        prefect_api_url=prefect_server.api_url,
        data_dir=tmp / "agent",
        poll_seconds=0.2,
        lease_seconds=30,
        status_seconds=1,
    )
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    agent_thread = threading.Thread(
        target=loop.run_until_complete, args=(Agent(settings).run(stop),), daemon=True
    )
    agent_thread.start()
    http = httpx.Client(base_url=base, timeout=30)
    token = http.post("/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}).json()[
        "token"
    ]
    http.headers["Authorization"] = f"Bearer {token}"
    kube = Client(KubeConfig.from_file(local_cluster.kubeconfig_path), field_manager="tests")
    yield Stack(url=base, http=http, kube=kube, tmp=tmp)
    loop.call_soon_threadsafe(stop.set)
    agent_thread.join(60)
    server.should_exit = True
    server_thread.join(10)
    http.close()
    kube.close()
    engine.dispose()


@pytest.fixture
def deployment_name(request: pytest.FixtureRequest) -> str:
    """A deployment name of its own for each test (the stack is shared)."""
    return "t" + str(abs(hash(request.node.name)) % 10**8)


CreateFn = Callable[..., dict[str, Any]]
