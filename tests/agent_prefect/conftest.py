"""A real Prefect server (the test worker's whole stack's) and an action runner of the tests' own, and a
driver of test actions."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

from styrmin_backend.actions import GlobalContext
from styrmin_backend.agent.prefect import ActionRunner

if TYPE_CHECKING:
    from styrmin_backend.testing import StyrminStack

TOKEN = "sty_act_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
"""The reconciliation's token the tests give their actions; it must never reach Prefect."""

AGENT_KEY = "sty_agent_key_of_the_agent_process_only"
"""A secret of the agent's own environment, which no action may see."""

ACTIONS = '''
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from prefect import flow, get_run_logger

from styrmin_backend.actions import GlobalContext


@flow
async def upgrade(context: GlobalContext, target_version: str) -> None:
    if not isinstance(context, GlobalContext):
        raise TypeError(f"context is a {type(context).__name__}, not a GlobalContext")
    get_run_logger().info("Upgrading %s to %s", context.deployment_name, target_version)


@flow
def post_setup(context: GlobalContext) -> None:
    get_run_logger().info("Set up %s in %s", context.deployment_name, context.namespace)


@flow
async def uses_token(context: GlobalContext) -> None:
    if os.environ.get("STYRMIN_TOKEN") != "{token}":
        raise RuntimeError("STYRMIN_TOKEN is not the reconciliation's token")
    if os.environ.get("STYRMIN_URL") != context.api_url:
        raise RuntimeError("STYRMIN_URL is not the API URL")
    get_run_logger().info("Calling the Styrmin API at %s", os.environ["STYRMIN_URL"])


@flow
async def sees_no_agent_secret(context: GlobalContext) -> None:
    leaked = [name for name, value in os.environ.items() if value == "{agent_key}"]
    if leaked:
        raise RuntimeError(f"The agent's own variables reached the action: {leaked}")


@flow
async def fails(context: GlobalContext) -> None:
    raise RuntimeError("Migration 0042 failed: table users is locked")


@flow
async def exits(context: GlobalContext) -> None:
    get_run_logger().warning("About to give up")
    get_run_logger().error("Cannot reach %s with token %s", os.environ["STYRMIN_URL"], os.environ["STYRMIN_TOKEN"])
    get_run_logger().error("A later error")
    sys.exit(3)


@flow
async def killed(context: GlobalContext) -> None:
    get_run_logger().error("Out of memory while holding token=%s", os.environ["STYRMIN_TOKEN"])
    os.kill(os.getpid(), signal.SIGKILL)


@flow
async def killed_silently(context: GlobalContext) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@flow
async def hangs(context: GlobalContext, pid_file: str) -> None:
    Path(pid_file).write_text(str(os.getpid()))
    await asyncio.sleep(600)


@flow
async def meets_the_others(context: GlobalContext, meeting: str, count: int) -> None:
    """Waits until ``count`` runs of it have arrived: only runs that run at the same time all succeed."""
    (Path(meeting) / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(Path(meeting).iterdir())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("The other runs never came: they did not run at the same time")
        await asyncio.sleep(0.05)


@flow
async def returns_a_value(context: GlobalContext) -> str:
    return "done in " + context.deployment_name


@flow(retries=1, retry_delay_seconds=0)
async def retried(context: GlobalContext, marker: str) -> None:
    """Fails its first run and succeeds its retry, logging the run count and start each run sees."""
    from prefect.context import FlowRunContext

    flow_run = FlowRunContext.get().flow_run
    get_run_logger().info("run %s of %s started %s", flow_run.run_count, flow_run.id, flow_run.start_time.isoformat())
    if not Path(marker).exists():
        Path(marker).write_text("tried")
        raise RuntimeError("The first run fails")


def not_a_flow(context):
    pass
'''.replace("{token}", TOKEN).replace("{agent_key}", AGENT_KEY)


@pytest.fixture(scope="session")
def prefect_api_url(whole_stack: StyrminStack) -> str:
    """The API of the Prefect server that the test worker's whole stack started (flow runs are named
    uniquely, so the stack's own runs do not get in the way)."""
    return whole_stack.prefect_api_url


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def runner(prefect_api_url: str) -> AsyncIterator[ActionRunner]:
    # The agent's own STYRMIN_* settings are in its environment when it makes its runner.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STYRMIN_AGENT_KEY", AGENT_KEY)
        action_runner = ActionRunner(prefect_api_url, pool_size=2)
    async with action_runner:
        await action_runner.wait_until_ready()
        yield action_runner


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def prefect_client(prefect_api_url: str) -> AsyncIterator[Any]:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(prefect_api_url) as client:
        yield client


@pytest.fixture(scope="session")
def driver_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("driver")
    (folder / "actions.py").write_text(textwrap.dedent(ACTIONS))
    return folder


def make_context(**changes: Any) -> dict[str, Any]:
    """A GlobalContext as the agent sends it: a plain JSON object."""
    fields: dict[str, Any] = {
        "deployment_id": 7,
        "deployment_name": "shop",
        "namespace": "shop",
        "cluster_id": "local",
        "driver_name": "shop",
        "driver_version": "1.1.0",
        "current_app_version": "1.0.0",
        "target_app_version": "1.1.0",
        "configuration": {"images": {"server": "registry.local:5000/shop:{{ app.version }}"}},
        "revision": 3,
        "task_id": 11,
        "hook_step_id": 12,
        "hook": "upgrade",
        "mode": "core",
        "api_url": "http://127.0.0.1:8080",
    }
    return GlobalContext(**fields | changes).model_dump(mode="json")


def action_env() -> dict[str, str]:
    return {"STYRMIN_TOKEN": TOKEN, "STYRMIN_URL": "http://127.0.0.1:8080"}


def flow_run_name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"
