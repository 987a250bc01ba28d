"""Run a driver's action as a Prefect flow run, isolated in a process of its own.

Each action runs in a process forked for it by the agent's fork server (see ``_pool``), as a flow
run recorded on the Prefect server, so the Prefect UI shows it with its logs. The agent is a worker
of a Prefect work pool in Prefect's own terms: it sends the worker heartbeats Prefect shows, and each
action's flow run is in that pool. Whatever the action does (raise, ``sys.exit``, get killed, run
too long, get cancelled from the Prefect UI), the agent gets an ``ActionOutcome`` and goes on.

The action's environment (``STYRMIN_TOKEN``, ``STYRMIN_URL``, ...) reaches it only through its
process's environment: the job pipe carries it, never a Prefect parameter, job variable or log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from styrmin_backend.agent.prefect import _protocol
from styrmin_backend.agent.prefect._pool import ActionProcess, ForkServer, RunnerProcessError
from styrmin_backend.agent.prefect._rest import PrefectApi
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.secrets import conceal, is_secret_name, secret_values
from styrmin_backend.metrics import counts_running_action
from styrmin_backend.prefect_connection import PrefectConnection

logger = logging.getLogger(__name__)

FlowRunStarted = Callable[[str], Awaitable[None]]
"""Called with a flow run's id when the flow run exists."""

_LOG_SHIP_INTERVAL = 0.5
"""Seconds between two sends of a running action's logs to the Prefect server."""
_LOG_BATCH_BYTES = 2 * 1024 * 1024
_CRASH_EXIT_GRACE = 5.0
"""How long a process that stopped reporting may take to exit before it is killed."""
_CANCEL_CHECK_SECONDS = 2.0
"""How often the agent reads a running action's flow run state, to see a cancel from the Prefect UI."""
HEARTBEAT_SECONDS = 30.0
"""Seconds between two heartbeats of the agent's Prefect worker (Prefect's own workers' default)."""
DEFAULT_WORK_POOL = "styrmin-agents"
"""The Prefect work pool the agents' workers, and their actions' flow runs, are in."""
WORK_POOL_TYPE = "styrmin-agent"
"""The type of that pool: no Prefect worker of another kind takes its runs (they start Running, in the
action's own process)."""
WORK_QUEUE = "default"
_AGENT_ONLY_ENV_PREFIXES = ("STYRMIN_", "PREFECT__")
"""The agent's own Styrmin settings (its key among them) and Prefect's per-run variables stay out of
every action's environment; an action gets the STYRMIN_* variables its job gives it."""
_PASSED_TO_ACTIONS = frozenset({"STYRMIN_RETRY_SECONDS"})
"""Except these: how long the primitives wait for Styrmin is the agent's setting too (docs/agent.md)."""
RESULT_STORAGE_KEPT_SECONDS = 60.0
"""How long the agent passes on its read of the Prefect server's default result storage."""


@dataclass(frozen=True)
class ActionOutcome:
    """How an action's run ended.

    Attributes:
        succeeded: whether the action's flow run completed.
        error: why it did not, as the hook step shows it (secrets redacted); None when it succeeded.
        flow_run_id: the Prefect flow run, to record on the step; None when the action could not even
            be loaded, so no flow run started.
        duration: seconds from the request to the outcome.
        cancelled: whether the run ended because someone cancelled its flow run (from the Prefect
            UI or API); its process was killed and the flow run is Cancelled.
    """

    succeeded: bool
    error: str | None
    flow_run_id: str | None
    duration: float
    cancelled: bool = False


def _exit_description(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    if returncode == 0:
        return "exited before its flow run ended"
    return f"exited with code {returncode}"


def _secrets_of(env: Mapping[str, str]) -> set[str]:
    """The values of ``env`` that must not appear in an error: the token and anything named like a secret."""
    return {value for name, value in env.items() if value and is_secret_name(name)}


class _LogShipper:
    """Sends the log records of one flow run to the Prefect server, in batches, in order."""

    def __init__(self, api: PrefectApi, secrets: set[str]) -> None:
        self._api = api
        self._secrets = secrets
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None

    def add(self, log: dict[str, Any]) -> None:
        log.pop("__payload_size__", None)
        if log.get("message"):
            # The action's token (and common forms of secrets) never reach the Prefect server.
            log["message"] = redact(str(log["message"]), self._secrets)
        self._pending.append(log)
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._send_later())

    async def _send_later(self) -> None:
        await asyncio.sleep(_LOG_SHIP_INTERVAL)
        await self.flush()

    async def flush(self) -> None:
        """Send every record received so far; returns once the server has them."""
        async with self._lock:
            pending, self._pending = self._pending, []
            batch: list[dict[str, Any]] = []
            size = 0
            for log in pending:
                batch.append(log)
                size += len(log.get("message") or "") + 200
                if size >= _LOG_BATCH_BYTES:
                    await self._send(batch)
                    batch, size = [], 0
            await self._send(batch)

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        if not batch:
            return
        try:
            await self._api.send_logs(batch)
        except Exception as exc:  # the run goes on; only the Prefect UI misses these lines
            logger.warning("Could not send %d log lines to the Prefect server: %s", len(batch), exc)

    async def close(self) -> None:
        await self.flush()
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer


class _ServerResultStorage:
    """The Prefect server's default result storage, as the agent read it lately.

    Prefect's engine asks the server for it in every flow run (about 5 ms of the server's CPU and a
    round trip). The agent reads it at most once a minute while actions start, and each job brings
    the answer, so the action's process does not ask: a change of it on the Prefect server reaches
    actions within that minute. A job that finds no fresh answer goes without one (its process asks,
    as Prefect does) and starts a read for the jobs after it. Only the agent reads it: an action's
    process runs driver code and could say anything.
    """

    def __init__(self) -> None:
        self._answer: _protocol.KnownResultStorage | None = None
        self._read_at = -RESULT_STORAGE_KEPT_SECONDS
        self._reading: asyncio.Task[None] | None = None

    def for_job(self, api: PrefectApi) -> _protocol.KnownResultStorage | None:
        """The answer to pass in a job while it is fresh; else ``None``, and a read starts."""
        if time.monotonic() - self._read_at < RESULT_STORAGE_KEPT_SECONDS:
            return self._answer
        if self._reading is None or self._reading.done():
            self._reading = asyncio.create_task(self._read(api), name="prefect-result-storage")
        return None

    async def close(self) -> None:
        """Stop a read still under way (the Prefect server may be down)."""
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading

    async def _read(self, api: PrefectApi) -> None:
        try:
            block_id = await api.default_result_storage()
        except Exception as error:  # the actions' processes ask for themselves meanwhile
            logger.debug("Could not read the Prefect server's default result storage: %s", error)
            return
        self._answer = _protocol.KnownResultStorage(block_id)
        self._read_at = time.monotonic()


class _ActionRun:
    """The agent's side of one action's run: the messages of its process and what they mean."""

    def __init__(
        self,
        process: ActionProcess,
        api: PrefectApi,
        location: str,
        on_flow_run: FlowRunStarted | None,
        secrets: set[str],
        flow_ids: dict[str, str],
    ) -> None:
        self.process = process
        self._flow_ids = flow_ids
        self.api = api
        self.location = location
        self.logs = _LogShipper(api, secrets)
        self.flow_run_id: str | None = None
        self.end: dict[str, Any] | None = None
        self._on_flow_run = on_flow_run

    async def follow(self) -> None:
        """Read messages until the process reports its outcome or its pipe closes."""
        while self.end is None:
            message = await self.process.next_message()
            if message is None:
                return
            self._take(message)
            if message["kind"] == _protocol.FLOW_RUN and self._on_flow_run is not None:
                try:
                    await self._on_flow_run(message["id"])
                except Exception as error:  # telling others must not stop the action
                    logger.warning(
                        "Could not pass on flow run %s of %s: %s", message["id"], self.location, error
                    )

    async def drain(self) -> None:
        """Read what the process still sends (log records) until it exits."""
        while (message := await self.process.next_message()) is not None:
            self._take(message)

    def _take(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == _protocol.LOG:
            self.logs.add(message["log"])
        elif kind == _protocol.FLOW_RUN:
            self.flow_run_id = message["id"]
            if message.get("flow_name") and message.get("flow_id"):
                self._flow_ids[str(message["flow_name"])] = str(message["flow_id"])
        elif kind == _protocol.END:
            self.end = message

    async def set_final_state(self, state_type: str, name: str, message: str) -> str | None:
        """Set the state (``state_type``, ``name``, ``message``) on the flow run unless it already
        ended; return the message of its final state."""
        if self.flow_run_id is None:
            return None
        current = await self.api.flow_run_state(self.flow_run_id)
        if current is not None and current.final:
            return current.message
        await self.api.force_flow_run_state(self.flow_run_id, state_type, name, message)
        return message

    async def first_error_line(self) -> str | None:
        """The first line of the first ERROR record of the flow run, as the Prefect server stores it."""
        if self.flow_run_id is None:
            return None
        message = await self.api.first_error_message(self.flow_run_id)
        lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
        return lines[0] if lines else None


class ActionRunner:
    """Runs driver actions as Prefect flow runs, each in a pre-started process of its own.

    Use it as an async context manager, or call ``start`` and ``close``::

        async with ActionRunner(api_url=server.api_url) as runner:
            outcome = await runner.run_action(driver_dir, "actions.py::upgrade", parameters, env, 600)

    Args:
        api_url: the Prefect server's API URL; default: ``PREFECT_API_URL``.
        pool_size: no longer used (each action's process is forked when it starts); kept so that
            callers of the pool of pre-started processes still work.
        python: the interpreter of the fork server; it must import styrmin_backend and Prefect.
        owner: a tag put on every flow run this runner starts, so that a later runner can find the
            runs this one left unfinished when its processes died (see :meth:`crash_runs_of`).
        work_pool: the Prefect work pool this runner is a worker of (made when missing).
        worker_name: this worker's name in the Prefect UI; default: ``owner``, else the host and pid.
        action_env: what every action's process gets to reach the cluster (``KUBECONFIG``): the
            fork server makes the cluster's client with it once, for every action to take.
    """

    def __init__(
        self,
        api_url: str | None = None,
        *,
        pool_size: int = 2,
        python: str = sys.executable,
        owner: str | None = None,
        work_pool: str = DEFAULT_WORK_POOL,
        worker_name: str | None = None,
        action_env: Mapping[str, str] | None = None,
    ) -> None:
        connection = PrefectConnection.from_settings(api_url)
        if not connection.api_url:
            raise ValueError(
                "No Prefect server to run actions on: set PREFECT_API_URL to its API URL "
                "(http://HOST:4200/api), or start a local Prefect server."
            )
        api_url = connection.api_url
        self.api_url: str = api_url
        self._connection = connection
        self.owner = owner
        self.work_pool = work_pool
        self.worker_name = worker_name or owner or f"styrmin-agent-{socket.gethostname()}-{os.getpid()}"
        self._heartbeats: asyncio.Task[None] | None = None
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(_AGENT_ONLY_ENV_PREFIXES) or name in _PASSED_TO_ACTIONS
        }
        env |= {"PREFECT_API_URL": api_url, "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}
        env |= dict(action_env or {})  # the cluster's: the fork server makes its client ahead
        env.setdefault("MALLOC_ARENA_MAX", "2")  # the fork server runs one thread; its children few
        self._pool = ForkServer(env, python)
        self._api: PrefectApi | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._flow_ids: dict[str, str] = {}
        """The Prefect server's id of each flow (by name) an action's flow run was made for: the next
        process creates its flow run with it, without asking for the flow first."""
        self._result_storage = _ServerResultStorage()

    async def start(self) -> None:
        """Connect to the Prefect server, start the fork server, and beat as a worker of the pool."""
        self._api = PrefectApi(self._connection)
        self._pool.fill()
        self._heartbeats = asyncio.create_task(self._beat(), name="prefect-worker-heartbeats")

    async def wait_until_ready(self) -> None:
        """Wait until the fork server is ready, so the next actions start at once."""
        await self._pool.wait_until_full()

    async def _beat(self) -> None:
        """Send the worker's heartbeat now and then every ``HEARTBEAT_SECONDS``; Prefect shows the
        worker Online, and the pool Ready, while they arrive."""
        assert self._api is not None
        has_pool = False
        while True:
            try:
                if not has_pool:
                    await self._make_the_work_pool()
                    has_pool = True
                await self._api.send_worker_heartbeat(self.work_pool, self.worker_name, HEARTBEAT_SECONDS)
            except Exception as error:  # an outage: the agent's Prefect watch deals with it
                has_pool = False
                logger.debug("The Prefect worker heartbeat of %s failed: %s", self.worker_name, error)
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def _make_the_work_pool(self) -> None:
        assert self._api is not None
        await self._api.make_work_pool(
            self.work_pool,
            WORK_POOL_TYPE,
            "The Styrmin agents: each is a worker; each action is a flow run here.",
        )

    async def close(self) -> None:
        """Stop the fork server; wait for the work of ended runs (their last logs) to finish."""
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
        await self._result_storage.close()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._pool.close()
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    async def __aenter__(self) -> ActionRunner:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @counts_running_action
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
        on_flow_run: FlowRunStarted | None = None,
    ) -> ActionOutcome:
        """Run the action at ``location`` ("actions.py::upgrade") of the driver in ``driver_dir``.

        Args:
            parameters: the flow's parameters, JSON-serialisable (``context`` as a dict, maybe
                ``target_version``); each is passed only when the action's function accepts it.
                Secret values in them are sent concealed (see ``domain.secrets``).
            env: environment variables of the action's process only (``STYRMIN_TOKEN``, ...).
            timeout: seconds the action may run; then its processes are killed and it fails.
            flow_run_name: the flow run's name in the Prefect UI; default: a generated one.
            tags: tags of the flow run in the Prefect UI.
            on_flow_run: awaited with the flow run's id as soon as the flow run exists, while the
                action runs (so the step can link to it at once).
        """
        if self._api is None:
            raise RuntimeError("ActionRunner.start() was not called.")
        started = time.monotonic()
        secrets = _secrets_of(env) | secret_values(dict(parameters))
        try:
            process = await self._pool.take()
        except RunnerProcessError as exc:
            return ActionOutcome(
                succeeded=False,
                error=f"Styrmin could not start a process to run action {location}: {exc}",
                flow_run_id=None,
                duration=time.monotonic() - started,
            )
        run = _ActionRun(process, self._api, location, on_flow_run, secrets, self._flow_ids)
        known_storage = self._result_storage.for_job(self._api)
        process.send_job(
            {
                "driver_dir": str(Path(driver_dir).resolve()),
                "location": location,
                # Prefect stores a flow run's parameters for anyone who reaches its API: secret values
                # go as "set" only; an action reads them through the Styrmin API with its token.
                "parameters": conceal(dict(parameters)),
                "env": dict(env),
                "flow_run_name": flow_run_name,
                "tags": [*tags, self.owner] if self.owner else list(tags),
                "flow_ids": dict(self._flow_ids),
                "result_storage": known_storage.encode() if known_storage is not None else None,
                "work_pool": self.work_pool,
                "work_queue": WORK_QUEUE,
            }
        )
        try:
            try:
                async with asyncio.timeout(timeout):
                    cancelled = await self._follow_unless_cancelled(run)
            except TimeoutError:
                error = await self._stop_timed_out(run, timeout)
                return self._outcome(run, started, error, secrets)
            if cancelled:
                error = await self._stop_cancelled(run)
                return self._outcome(run, started, error, secrets, cancelled=True)
            if run.end is None or run.end.get("state") == "CRASHED":
                error = await self._crash_error(run)
                return self._outcome(run, started, error, secrets)
        except asyncio.CancelledError:
            process.kill()
            self._in_background(self._cancel(run))
            raise
        self._in_background(self._finish(run))
        await run.logs.flush()
        if run.end.get("succeeded"):
            return self._outcome(run, started, None, secrets)
        error = str(run.end.get("error") or "The action failed without a message.")
        if run.end.get("load_error"):
            error = f"Action {location} could not be loaded: {error}"
        return self._outcome(run, started, error, secrets)

    async def replace_ready_processes(self) -> None:
        """Replace the processes started ahead, whose Prefect clients knew a server that went away."""
        await self._pool.replace_ready()

    async def crash_runs_of(
        self, owner: str, message: str, *, created_before: datetime | None = None
    ) -> list[str]:
        """Mark the unfinished flow runs tagged ``owner`` Crashed with ``message``; returns their ids.

        For the runs of an earlier runner whose processes died with it (an agent killed with
        ``kill -9``), or of this one made before ``created_before`` (actions stopped because the
        Prefect server went away): nothing will ever end them otherwise, and the Prefect UI would
        show them running.
        """
        if self._api is None:
            raise RuntimeError("ActionRunner.start() was not called.")
        crashed = []
        for flow_run_id in await self._api.unfinished_flow_runs(owner, created_before=created_before):
            await self._api.force_flow_run_state(flow_run_id, "CRASHED", "Crashed", message)
            crashed.append(flow_run_id)
        return crashed

    def _outcome(
        self,
        run: _ActionRun,
        started: float,
        error: str | None,
        secrets: set[str],
        *,
        cancelled: bool = False,
    ) -> ActionOutcome:
        return ActionOutcome(
            succeeded=error is None,
            error=None if error is None else redact(error, secrets),
            flow_run_id=run.flow_run_id,
            duration=time.monotonic() - started,
            cancelled=cancelled,
        )

    async def _follow_unless_cancelled(self, run: _ActionRun) -> bool:
        """Follow the run to its end; True, at once, if its flow run was cancelled in Prefect first."""
        follow = asyncio.ensure_future(run.follow())
        watch = asyncio.ensure_future(self._cancel_requested(run))
        try:
            await asyncio.wait({follow, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (follow, watch):
                if not task.done():
                    task.cancel()
            await asyncio.gather(follow, watch, return_exceptions=True)
        if follow.done() and not follow.cancelled() and follow.exception() is None:
            return False
        if watch.done() and not watch.cancelled() and watch.exception() is None:
            return True
        follow.result()  # raises what stopped the following
        return False

    async def _cancel_requested(self, run: _ActionRun) -> None:
        """Return once the run's flow run is Cancelling (a cancel from the Prefect UI or API) or Cancelled."""
        while True:
            await asyncio.sleep(_CANCEL_CHECK_SECONDS)
            if run.flow_run_id is None:
                continue
            try:
                state = await run.api.flow_run_state(run.flow_run_id)
            except Exception as error:  # a Prefect outage: the agent's Prefect watch deals with it
                logger.debug("Could not read flow run %s: %s", run.flow_run_id, error)
                continue
            if state is not None and state.type in ("CANCELLING", "CANCELLED"):
                return

    async def _stop_cancelled(self, run: _ActionRun) -> str:
        run.process.kill()
        await run.process.wait_exit(_CRASH_EXIT_GRACE)
        await run.drain()
        await run.process.close()
        await run.logs.close()
        await run.set_final_state(
            "CANCELLED", "Cancelled", "Styrmin stopped the action: its flow run was cancelled."
        )
        return (
            f"Action {run.location} was cancelled: its flow run {run.flow_run_id} was cancelled in Prefect."
        )

    async def _crash_error(self, run: _ActionRun) -> str:
        """The error of a run whose process crashed: its first ERROR line, or its state's message."""
        returncode = await run.process.wait_exit(_CRASH_EXIT_GRACE)
        await run.drain()
        await run.process.close()
        await run.logs.close()
        how = _exit_description(returncode)
        if run.flow_run_id is None:
            return f"Action {run.location} crashed before its flow run started: its process {how}."
        state_message = await run.set_final_state(
            "CRASHED", "Crashed", f"The process running the flow run {how}."
        )
        first_error = await run.first_error_line()
        if first_error:
            return f"Action {run.location} crashed (its process {how}): {first_error}"
        return f"Action {run.location} crashed: {state_message or f'its process {how}.'}"

    async def _stop_timed_out(self, run: _ActionRun, timeout: float) -> str:
        error = (
            f"Action {run.location} did not end within its timeout of {timeout:g} s, so Styrmin stopped it. "
            "Make the action faster, or raise its timeout in driver.styrmin.yml."
        )
        run.process.kill()
        await run.process.wait_exit(_CRASH_EXIT_GRACE)
        await run.drain()
        await run.process.close()
        await run.logs.close()
        await run.set_final_state("FAILED", "TimedOut", error)
        return error

    async def _finish(self, run: _ActionRun) -> None:
        """After the outcome: ship the process's last log records and let it exit."""
        await run.drain()
        await run.logs.close()
        await run.process.wait_exit(30.0)
        await run.process.close()

    async def _cancel(self, run: _ActionRun) -> None:
        await run.process.wait_exit(_CRASH_EXIT_GRACE)
        await run.drain()
        await run.process.close()
        await run.logs.close()
        await run.set_final_state(
            "CANCELLED", "Cancelled", "Styrmin stopped the action: its change was stopped."
        )

    def _in_background(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("Ending an action's flow run failed: %s", task.exception())
