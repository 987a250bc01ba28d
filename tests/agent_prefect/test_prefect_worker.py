"""The agent's runner in Prefect's own terms: a worker of a work pool, whose flow runs are in that pool
and can be cancelled from the Prefect UI; on a real Prefect server."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from styrmin_backend.agent.prefect import ActionRunner
from tests.agent_prefect.conftest import action_env, flow_run_name, make_context

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _wait_for(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


def _hang(runner: ActionRunner, driver_dir: Path, pid_file: Path, started: list[str]) -> Any:
    async def flow_run_started(flow_run_id: str) -> None:
        started.append(flow_run_id)

    return runner.run_action(
        driver_dir,
        "actions.py::hangs",
        {"context": make_context(), "pid_file": str(pid_file)},
        action_env(),
        600,
        flow_run_name=flow_run_name(),
        on_flow_run=flow_run_started,
    )


async def test_the_runner_is_an_online_worker_of_its_work_pool(
    runner: ActionRunner, prefect_client: Any
) -> None:
    async def online() -> bool:
        try:
            workers = await prefect_client.read_workers_for_work_pool(runner.work_pool, limit=50, offset=0)
        except Exception:
            return False
        return any(w.name == runner.worker_name and w.status.value == "ONLINE" for w in workers)

    await _wait_for(online, f"worker {runner.worker_name} never showed online in pool {runner.work_pool}")
    pool = await prefect_client.read_work_pool(runner.work_pool)
    assert pool.status is not None and pool.status.value == "READY"


async def test_an_actions_flow_run_is_in_the_workers_pool(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await runner.run_action(
        driver_dir,
        "actions.py::upgrade",
        {"context": make_context(), "target_version": "2.0.0"},
        action_env(),
        60,
    )

    assert outcome.succeeded, outcome
    flow_run = await prefect_client.read_flow_run(uuid.UUID(outcome.flow_run_id))
    assert flow_run.work_pool_name == runner.work_pool
    assert flow_run.work_queue_name == "default"


async def test_cancelling_the_awaiting_task_kills_the_action_and_cancels_its_flow_run(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any, tmp_path: Path
) -> None:
    pid_file, started = tmp_path / "pid", []
    running = asyncio.create_task(_hang(runner, driver_dir, pid_file, started))

    async def action_runs() -> bool:
        return bool(started) and pid_file.exists() and bool(pid_file.read_text())

    await _wait_for(action_runs, "the action never started")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    pid = int(pid_file.read_text())

    async def ended() -> bool:
        flow_run = await prefect_client.read_flow_run(uuid.UUID(started[0]))
        return not _pid_alive(pid) and flow_run.state.is_cancelled()

    await _wait_for(ended, "the action's process still runs, or its flow run is not Cancelled")


async def test_a_flow_run_cancelled_in_prefect_kills_the_action_and_ends_cancelled(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any, tmp_path: Path
) -> None:
    from prefect.states import Cancelling

    pid_file, started = tmp_path / "pid", []
    running = asyncio.create_task(_hang(runner, driver_dir, pid_file, started))

    async def action_runs() -> bool:
        return bool(started) and pid_file.exists() and bool(pid_file.read_text())

    await _wait_for(action_runs, "the action never started")
    # What the Prefect UI's Cancel button does.
    await prefect_client.set_flow_run_state(uuid.UUID(started[0]), Cancelling(), force=True)
    outcome = await asyncio.wait_for(running, 120)

    assert outcome.cancelled and not outcome.succeeded
    assert "was cancelled" in outcome.error
    assert not _pid_alive(int(pid_file.read_text()))
    flow_run = await prefect_client.read_flow_run(uuid.UUID(started[0]))
    assert flow_run.state.is_cancelled()
