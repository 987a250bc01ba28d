"""Actions of one task whose flow run, when cancelled from the Prefect UI, cancels the Styrmin task.

The runner tells a flow run cancelled in Prefect (``ActionOutcome.cancelled``) from one that failed;
the agent then asks the server to cancel the task (with the tasks its actions started) and stops the
task's reconciliation, as a cancel from Styrmin would.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from styrmin_backend.agent.prefect import ActionOutcome
from styrmin_backend.agent.server_api import ServerError

log = logging.getLogger("styrmin.agent")


class ActionRuns(Protocol):
    """The action runner (``agent.prefect.ActionRunner``), whose outcome says whether it was cancelled."""

    def run_action(
        self,
        driver_dir: Path,
        location: str,
        parameters: Mapping[str, Any],
        env: Mapping[str, str],
        timeout: float,
        *,
        flow_run_name: str | None = None,
        tags: Iterable[str] = (),
        on_flow_run: Callable[[str], Awaitable[None]] | None = None,
    ) -> Awaitable[ActionOutcome]: ...


class CancelApi(Protocol):
    async def cancelled_in_prefect(self, task_id: int, flow_run_id: str) -> None: ...


class CancelFromPrefect:
    """``run_action`` of task ``task_id``: an outcome cancelled in Prefect cancels the task."""

    def __init__(
        self, runner: ActionRuns, api: CancelApi, task_id: int, stop_reconciliation: Callable[[], None]
    ) -> None:
        self._runner = runner
        self._api = api
        self._task_id = task_id
        self._stop_reconciliation = stop_reconciliation

    async def run_action(
        self,
        driver_dir: Path,
        location: str,
        parameters: Mapping[str, Any],
        env: Mapping[str, str],
        timeout: float,
        *,
        flow_run_name: str | None = None,
        tags: Iterable[str] = (),
        on_flow_run: Callable[[str], Awaitable[None]] | None = None,
    ) -> ActionOutcome:
        """Run the action; when its flow run was cancelled from the Prefect UI, cancel the task too."""
        outcome = await self._runner.run_action(
            driver_dir,
            location,
            parameters,
            env,
            timeout,
            flow_run_name=flow_run_name,
            tags=tags,
            on_flow_run=on_flow_run,
        )
        if outcome.cancelled:
            log.info("Task %s: flow run %s was cancelled in Prefect", self._task_id, outcome.flow_run_id)
            try:
                await self._api.cancelled_in_prefect(self._task_id, outcome.flow_run_id or "unknown")
            except ServerError as error:
                if not error.task_lost:
                    raise
            self._stop_reconciliation()
        return outcome
