"""Runner processes started ahead of time, each used for one action and then replaced.

Starting Python and importing Prefect takes about 2-3 s; a pre-started process runs an action's flow
run in about a tenth of a second. Each process still serves a single action, so an action's crash
never touches another action or the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from styrmin_backend.agent.prefect import _protocol
from styrmin_backend.metrics import RUNNER_PROCESSES_READY

logger = logging.getLogger(__name__)

_REFILL_DELAY_SECONDS = 1.0
"""How long after the last action started a replacement starts, while others are still ready: hook
steps that follow each other quickly (pre, core, post) then do not share the CPU with a process that
imports Prefect."""


class RunnerProcessError(Exception):
    """A runner process ended before it was ready to take an action."""


class RunnerProcess:
    """One runner process, seen from the agent: its job pipe, its message pipe and its exit."""

    def __init__(
        self, process: asyncio.subprocess.Process, messages: asyncio.StreamReader, pipe: asyncio.BaseTransport
    ) -> None:
        self.process = process
        self._messages = messages
        self._pipe = pipe

    @classmethod
    async def start(cls, python: str, env: Mapping[str, str]) -> RunnerProcess:
        """Start a process and return once it has imported Prefect and waits for its job."""
        read_fd, write_fd = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                python,
                "-m",
                "styrmin_backend.agent.prefect._process",
                str(write_fd),
                str(os.getpid()),
                stdin=asyncio.subprocess.PIPE,
                pass_fds=(write_fd,),
                env=dict(env),
                # Its own process group, so a timeout kills whatever the action started too.
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_protocol.MESSAGE_LIMIT)
        pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        runner = cls(process, reader, pipe)
        try:
            ready = await runner.next_message()
        except BaseException:
            await asyncio.shield(runner.close())
            raise
        if ready is None or ready["kind"] != _protocol.READY:
            returncode = await process.wait()
            await runner.close()
            raise RunnerProcessError(
                f"An action runner process exited with code {returncode} before it was ready; "
                "see the agent's log for its output."
            )
        return runner

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def send_job(self, job: dict[str, Any]) -> None:
        """Give the process its one job."""
        assert self.process.stdin is not None
        self.process.stdin.write(_protocol.encode("job", **job))
        self.process.stdin.close()

    async def next_message(self) -> dict[str, Any] | None:
        """The next message of the process, or None once its pipe is closed (it exited)."""
        line = await self._messages.readline()
        return _protocol.decode(line) if line else None

    def kill(self) -> None:
        """Kill the process and every process it started (its process group)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def close(self) -> None:
        """Kill the process if it still runs, wait for it, and close its pipes."""
        self.kill()
        if self.process.stdin is not None:
            self.process.stdin.close()
        await self.process.wait()
        self._pipe.close()

    async def wait_exit(self, grace: float) -> int:
        """Wait up to ``grace`` seconds for the process to exit, then kill it; return its exit code."""
        try:
            return await asyncio.wait_for(self.process.wait(), grace)
        except TimeoutError:
            self.kill()
            return await self.process.wait()


class RunnerPool:
    """Keeps ``size`` runner processes started and ready; hands each out once.

    Processes start one at a time, and a little after the last action started: starting one is
    CPU-heavy (imports), and would slow the actions running meanwhile. A request that finds no ready
    process waits for the next one.
    """

    def __init__(self, size: int, env: Mapping[str, str], python: str = sys.executable) -> None:
        self._size = size
        self._env = dict(env)
        self._python = python
        self._ready: asyncio.Queue[RunnerProcess | RunnerProcessError] = asyncio.Queue()
        self._waiting = 0
        self._full = asyncio.Event()
        self._starting: asyncio.Task[None] | None = None
        self._delayed_fill: asyncio.TimerHandle | None = None
        self._closed = False

    def fill(self) -> None:
        """Start processes, one after another, until ``size`` are ready beyond those waited for."""
        if not self._closed and (self._starting is None or self._starting.done()):
            self._starting = asyncio.create_task(self._start_until_full())

    async def _start_until_full(self) -> None:
        try:
            while not self._closed and self._ready.qsize() < self._size + self._waiting:
                try:
                    process = await RunnerProcess.start(self._python, self._env)
                except RunnerProcessError as exc:
                    # Handed to one waiting request; the next request starts the pool again. With no
                    # request waiting it is only logged: handed out later, it would fail an action
                    # for a cause that may be long gone (the Prefect server away for a while).
                    if self._waiting:
                        self._ready.put_nowait(exc)
                    else:
                        logger.warning("%s It is started again when an action needs it.", exc)
                    return
                self._ready.put_nowait(process)
                RUNNER_PROCESSES_READY.inc()
        finally:
            self._full.set()

    async def wait_until_full(self) -> None:
        """Wait until ``size`` processes are ready (or starting one failed)."""
        self.fill()
        await self._full.wait()

    async def take(self) -> RunnerProcess:
        """A ready process for one action, waiting for the next one to start if none is ready.

        Raises:
            RunnerProcessError: a process died before it was ready.
        """
        self._waiting += 1
        try:
            while True:
                if self._ready.empty():
                    self.fill()
                process = await self._ready.get()
                self._full.clear()
                if isinstance(process, RunnerProcessError):
                    raise process
                RUNNER_PROCESSES_READY.dec()
                if process.alive:
                    return process
        finally:
            self._waiting -= 1
            self._fill_soon()

    def _fill_soon(self) -> None:
        if self._delayed_fill is not None:
            self._delayed_fill.cancel()
        if self._waiting or self._ready.empty():
            self.fill()
        else:
            self._delayed_fill = asyncio.get_running_loop().call_later(_REFILL_DELAY_SECONDS, self.fill)

    async def replace_ready(self) -> None:
        """Stop the ready processes and start new ones (after the Prefect server came back)."""
        while not self._ready.empty():
            process = self._ready.get_nowait()
            if isinstance(process, RunnerProcess):
                RUNNER_PROCESSES_READY.dec()
                await process.close()
        self._full.clear()
        self.fill()

    async def close(self) -> None:
        """Stop the ready processes and the one starting."""
        self._closed = True
        if self._delayed_fill is not None:
            self._delayed_fill.cancel()
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        while not self._ready.empty():
            process = self._ready.get_nowait()
            if isinstance(process, RunnerProcess):
                RUNNER_PROCESSES_READY.dec()
                await process.close()
