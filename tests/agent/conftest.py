"""The whole stack on this machine: server on loopback, embedded local cluster, Prefect server, agent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from lightkube import Client

from styrmin_backend.drivers import pack_driver_folder
from styrmin_backend.testing import StyrminStack
from styrmin_localcluster import LocalCluster
from tests.support.drivers import driver_folder

TEST_ACTIONS = textwrap.dedent(
    """
    import sys

    from prefect import flow, get_run_logger

    from styrmin_backend.actions import (
        GlobalContext,
        execute_commands,
        get_component_images,
        start_components,
        stop_components,
        upgrade_deployment_version,
    )


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
        Path(context.configuration.values["proof_file"]).write_text(token)


    @flow
    async def sleeps(context: GlobalContext) -> None:
        import asyncio

        await asyncio.sleep(120)


    @flow
    async def fails(context: GlobalContext) -> None:
        raise RuntimeError("Migration 0042 failed: table users is locked")


    @flow
    async def stops_upgrades_starts(context: GlobalContext, target_version: str) -> None:
        # The seed's upgrade without the migration: each primitive starts a task and waits for it.
        await stop_components(components=["task-worker"], context=context)
        await upgrade_deployment_version(target_version=target_version, context=context)
        await start_components(components=["task-worker"], context=context)


    @flow
    async def upgrade_with_held_migration(context: GlobalContext, target_version: str) -> None:
        # The seed's upgrade; its migration Job runs until the file values.migration_gate names exists.
        await stop_components(components=["task-worker"], context=context)
        await upgrade_deployment_version(target_version=target_version, context=context)
        images = await get_component_images(component="server", context=context)
        name = images[0].split("@", 1)[0]
        repository, separator, tag = name.rpartition(":")
        image_base = repository if separator and "/" not in tag else name
        gate = context.configuration.values["migration_gate"]
        await execute_commands(
            ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.2; done; echo "migrated to {target_version}"'],
            image=f"{image_base}:{target_version}",
            context=context,
            env_from_component="server",
        )
        await start_components(components=["task-worker"], context=context)


    @flow
    def exits(context: GlobalContext) -> None:
        get_run_logger().error("Giving up: password=hunter2 is wrong")
        sys.exit(3)
    """
)


@dataclass
class Stack:
    """A running Styrmin with its agent, and helpers to drive it as an operator would over HTTP."""

    url: str
    http: httpx.Client
    kube: Client
    tmp: Path
    cluster: LocalCluster
    prefect_api_url: str

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
            if task["status"] in ("succeeded", "failed", "cancelled"):
                return task
            time.sleep(0.2)
        raise AssertionError(
            f"task {task_id} did not end: {self.http.get(f'/api/v1/tasks/{task_id}').json()}"
        )


def start_agent(stack: Stack, key: str, data: Path, **settings: object) -> subprocess.Popen[bytes]:
    """`styrmin agent` in a process of its own, for another cluster of the stack's server and Prefect."""
    env = {
        **os.environ,
        "STYRMIN_AGENT_SERVER_URL": stack.url,
        "STYRMIN_AGENT_KEY": key,
        "STYRMIN_AGENT_KUBECONFIG": str(stack.cluster.kubeconfig_path),
        "STYRMIN_AGENT_PREFECT_API_URL": stack.prefect_api_url,
        "STYRMIN_AGENT_DATA_DIR": str(data),
        "STYRMIN_AGENT_LEASE_SECONDS": "5",
        "STYRMIN_AGENT_POLL_SECONDS": "0.2",
        **{f"STYRMIN_AGENT_{name.upper()}": str(value) for name, value in settings.items()},
    }
    return subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", "agent"], env=env, start_new_session=True
    )


def action(name: str, hook: str, mode: str, function: str) -> dict[str, Any]:
    return {"name": name, "hook": hook, "mode": mode, "location": f"actions.py::{function}"}


@pytest.fixture(scope="session")
def stack(whole_stack: StyrminStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The worker's whole stack (tests/conftest.py), driven over HTTP as admin; its agent reports every second.

    Driver versions pushed here carry the test actions: tests/actions pushes its own at other versions.
    """
    with httpx.Client(base_url=whole_stack.url, timeout=120) as http:  # pushes on a loaded machine
        token = http.post(
            "/api/v1/auth/login", json={"username": "admin", "password": whole_stack.admin_password}
        ).json()["token"]
        http.headers["Authorization"] = f"Bearer {token}"
        yield Stack(
            whole_stack.url,
            http,
            whole_stack.kube,
            tmp_path_factory.mktemp("stack"),
            whole_stack.cluster,
            whole_stack.prefect_api_url,
        )


@pytest.fixture
def deployment_name(request: pytest.FixtureRequest) -> str:
    """A deployment name of its own for each test (the stack is shared)."""
    return "t" + str(abs(hash(request.node.name)) % 10**8)


CreateFn = Callable[..., dict[str, Any]]
