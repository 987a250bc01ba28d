"""Actions run as Prefect flow runs on a real Prefect server, each in a process of its own.

They run on the Prefect server of the test worker's whole stack, with runner processes of their own; one
file, so that one pytest-xdist worker starts those processes."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from styrmin_backend.agent.prefect import ActionRunner
from styrmin_backend.domain.limits import REDACTED
from tests.agent_prefect.conftest import TOKEN, action_env, flow_run_name, make_context

if TYPE_CHECKING:
    from styrmin_backend.testing import StyrminStack

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]


async def _flow_run(client: Any, flow_run_id: str) -> Any:
    return await client.read_flow_run(uuid.UUID(flow_run_id))


async def _log_messages(client: Any, flow_run_id: str) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = await client.read_logs(
        LogFilter(flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(flow_run_id)])), limit=200, offset=0
    )
    return [log.message for log in logs]


async def _run(
    runner: ActionRunner, driver_dir: Path, function: str, timeout: float = 60, **parameters: Any
) -> Any:
    return await runner.run_action(
        driver_dir,
        f"actions.py::{function}",
        {"context": make_context(), **parameters},
        action_env(),
        timeout,
        flow_run_name=flow_run_name(),
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_local_prefect_server_serves_its_ui(whole_stack: StyrminStack) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(whole_stack.prefect_ui_url)

    assert response.status_code == 200
    assert "<html" in response.text.lower()
    # Its state is in SQLite in the Prefect folder of Styrmin's data folder (next to the cluster's).
    assert (whole_stack.cluster.data_dir.parent / "prefect" / "prefect.db").is_file()


async def test_action_runs_as_a_completed_flow_run_with_its_logs(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "upgrade", target_version="1.1.0")

    assert outcome.succeeded, outcome.error
    assert outcome.error is None
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    assert flow_run.state.is_completed()
    assert flow_run.parameters["target_version"] == "1.1.0"
    assert flow_run.parameters["context"]["deployment_name"] == "shop"
    assert "Upgrading shop to 1.1.0" in await _log_messages(prefect_client, outcome.flow_run_id)


@pytest.mark.parametrize("function", ["upgrade", "post_setup"])  # an async and a sync action
async def test_an_actions_flow_run_records_its_version_start_and_every_state(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any, function: str
) -> None:
    outcome = await _run(runner, driver_dir, function, target_version="1.1.0")

    assert outcome.succeeded, outcome.error
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    states = await prefect_client.read_flow_run_states(uuid.UUID(outcome.flow_run_id))
    # Made Running by its creation: the action's process runs it at once.
    assert [state.type.value for state in states] == ["RUNNING", "COMPLETED"]
    assert flow_run.flow_version and flow_run.run_count == 1
    assert flow_run.start_time is not None and flow_run.end_time is not None
    assert flow_run.empirical_policy.retries == 0


async def test_a_retried_action_sees_each_runs_count_and_the_servers_start_time(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any, tmp_path: Path
) -> None:
    outcome = await _run(runner, driver_dir, "retried", marker=str(tmp_path / "marker"))

    assert outcome.succeeded, outcome.error
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    assert flow_run.run_count == 2
    states = await prefect_client.read_flow_run_states(uuid.UUID(outcome.flow_run_id))
    first_running = next(state for state in states if state.type.value == "RUNNING")
    assert flow_run.start_time == first_running.timestamp
    runs = [
        message
        for message in await _log_messages(prefect_client, outcome.flow_run_id)
        if message.startswith("run ")
    ]
    started = f"of {outcome.flow_run_id} started {flow_run.start_time.isoformat()}"
    assert runs == [f"run 1 {started}", f"run 2 {started}"]


async def test_actions_keep_their_results_in_the_prefect_servers_default_storage(
    prefect_api_url: str, driver_dir: Path, prefect_client: Any, tmp_path: Path
) -> None:
    """The agent reads the Prefect server's default result storage for its actions (at most once a
    minute) and each action's flow run keeps its result there, as Prefect's own engine would."""
    from prefect.filesystems import LocalFileSystem

    results = tmp_path / "results"
    block_id = await LocalFileSystem(basepath=str(results)).asave(
        f"styrmin-test-{uuid.uuid4().hex[:8]}", client=prefect_client
    )
    await prefect_client.update_server_default_result_storage(block_id)
    try:
        async with ActionRunner(prefect_api_url, pool_size=1) as fresh:
            kept = []
            for _ in range(3):  # the first asks for itself; the agent passes its read to the others
                outcome = await _run(fresh, driver_dir, "returns_a_value")
                assert outcome.succeeded, outcome.error
                kept.append(len(list(results.iterdir())) if results.is_dir() else 0)
    finally:
        await prefect_client.clear_server_default_result_storage()

    assert kept == [1, 2, 3]


async def test_an_action_whose_flow_was_deleted_in_prefect_runs_under_its_flow_made_again(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    first = await _run(runner, driver_dir, "post_setup")
    assert first.succeeded, first.error
    flow_id = (await _flow_run(prefect_client, first.flow_run_id)).flow_id
    again = await _run(runner, driver_dir, "post_setup")
    assert again.succeeded, again.error
    assert (await _flow_run(prefect_client, again.flow_run_id)).flow_id == flow_id

    await prefect_client.delete_flow(flow_id)  # as from the Prefect UI, with its runs
    after = await _run(runner, driver_dir, "post_setup")

    assert after.succeeded, after.error
    flow_run = await _flow_run(prefect_client, after.flow_run_id)
    assert flow_run.flow_id != flow_id and flow_run.state.is_completed()
    assert "Set up shop in shop" in await _log_messages(prefect_client, after.flow_run_id)


async def test_sync_action_runs_too(runner: ActionRunner, driver_dir: Path, prefect_client: Any) -> None:
    outcome = await _run(runner, driver_dir, "post_setup")

    assert outcome.succeeded, outcome.error
    assert "Set up shop in shop" in await _log_messages(prefect_client, outcome.flow_run_id)


async def test_target_version_is_passed_only_to_an_action_that_accepts_it(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "post_setup", target_version="1.1.0")

    assert outcome.succeeded, outcome.error
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    assert "target_version" not in flow_run.parameters


async def test_token_reaches_the_action_only_through_its_environment(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "uses_token")

    assert outcome.succeeded, outcome.error
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    assert TOKEN not in json.dumps(flow_run.parameters)
    assert TOKEN not in json.dumps(flow_run.job_variables or {})
    assert TOKEN not in flow_run.model_dump_json()
    messages = await _log_messages(prefect_client, outcome.flow_run_id)
    assert "Calling the Styrmin API at http://127.0.0.1:8080" in messages
    assert not [message for message in messages if TOKEN in message]


async def test_agent_settings_do_not_reach_the_action(runner: ActionRunner, driver_dir: Path) -> None:
    outcome = await _run(runner, driver_dir, "sees_no_agent_secret")

    assert outcome.succeeded, outcome.error


async def test_action_that_raises_fails_with_the_exception_type_and_message(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "fails")

    assert not outcome.succeeded
    assert outcome.error == "RuntimeError: Migration 0042 failed: table users is locked"
    assert (await _flow_run(prefect_client, outcome.flow_run_id)).state.is_failed()


async def test_sys_exit_crash_fails_with_the_first_error_line_redacted(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "exits")

    assert not outcome.succeeded
    assert f"Cannot reach http://127.0.0.1:8080 with token {REDACTED}" in outcome.error
    assert "A later error" not in outcome.error
    assert "exited with code 3" in outcome.error
    assert TOKEN not in outcome.error
    assert (await _flow_run(prefect_client, outcome.flow_run_id)).state.is_crashed()


async def test_kill_9_crash_fails_with_the_first_error_line_redacted(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "killed")

    assert not outcome.succeeded
    assert f"Out of memory while holding token={REDACTED}" in outcome.error
    assert "killed by signal 9 (SIGKILL)" in outcome.error
    assert TOKEN not in outcome.error
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    assert flow_run.state.is_crashed()
    # The line was logged just before the kill: the agent still sent it to the Prefect server.
    assert any(
        "Out of memory" in message for message in await _log_messages(prefect_client, outcome.flow_run_id)
    )


async def test_kill_9_crash_without_error_line_fails_with_the_state_message(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any
) -> None:
    outcome = await _run(runner, driver_dir, "killed_silently")

    assert not outcome.succeeded
    assert outcome.error == (
        "Action actions.py::killed_silently crashed: "
        "The process running the flow run was killed by signal 9 (SIGKILL)."
    )


async def test_timeout_kills_the_action_and_fails_it_with_a_clear_message(
    runner: ActionRunner, driver_dir: Path, prefect_client: Any, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"

    outcome = await _run(runner, driver_dir, "hangs", timeout=3, pid_file=str(pid_file))

    assert not outcome.succeeded
    assert outcome.error.startswith("Action actions.py::hangs did not end within its timeout of 3 s")
    assert outcome.duration < 30  # far less than the 600 s the action would sleep
    assert not _pid_alive(int(pid_file.read_text()))
    flow_run = await _flow_run(prefect_client, outcome.flow_run_id)
    assert flow_run.state.is_failed()
    assert flow_run.state.name == "TimedOut"


async def test_actions_of_one_mode_run_concurrently_each_in_its_own_process(
    runner: ActionRunner, driver_dir: Path, tmp_path: Path
) -> None:
    outcomes = await asyncio.gather(
        *(_run(runner, driver_dir, "meets_the_others", meeting=str(tmp_path), count=3) for _ in range(3)),
        _run(runner, driver_dir, "killed"),
    )

    assert [outcome.succeeded for outcome in outcomes] == [True, True, True, False], outcomes
    pids = {path.name for path in tmp_path.iterdir()}
    assert len(pids) == 3
    assert str(os.getpid()) not in pids
    assert len({outcome.flow_run_id for outcome in outcomes}) == 4


async def test_action_that_is_not_a_flow_fails_without_a_flow_run(
    runner: ActionRunner, driver_dir: Path
) -> None:
    outcome = await _run(runner, driver_dir, "not_a_flow")

    assert not outcome.succeeded
    assert outcome.flow_run_id is None
    assert "is not a Prefect flow" in outcome.error
    assert outcome.error.startswith("Action actions.py::not_a_flow could not be loaded")
