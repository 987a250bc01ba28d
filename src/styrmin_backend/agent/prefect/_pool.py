"""The agent's side of the fork server (``_process``): one process that forks a process per action.

Starting Python and importing Prefect takes about a second of CPU; a fork of a process that did it
once takes about a millisecond, and uses up nothing that must be made again afterwards. Each forked
process still serves a single action, in a session of its own, so an action's crash never touches
another action, the fork server or the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

from styrmin_backend.agent.prefect import _protocol
from styrmin_backend.metrics import RUNNER_PROCESSES_READY

logger = logging.getLogger(__name__)

_LOST_RETURNCODE = -signal.SIGKILL
"""The exit code of an action's process whose fork server died: Linux killed it with the server."""


class RunnerProcessError(Exception):
    """The fork server could not start, or ended before it forked an action's process."""


class ActionProcess:
    """One action's forked process, seen from the agent: its socket, its pid and its exit."""

    def __init__(
        self,
        pid: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        exited: asyncio.Future[int],
    ) -> None:
        self.pid = pid
        self._reader = reader
        self._writer = writer
        self._exited = exited

    @property
    def alive(self) -> bool:
        return not self._exited.done()

    def send_job(self, job: dict[str, Any]) -> None:
        """Give the process its one job."""
        self._writer.write(_protocol.encode("job", **job))
        self._writer.write_eof()

    async def next_message(self) -> dict[str, Any] | None:
        """The next message of the process, or None once its socket is closed (it exited)."""
        line = await self._reader.readline()
        return _protocol.decode(line) if line else None

    def kill(self) -> None:
        """Kill the process and every process it started (its process group)."""
        if not self.alive:  # its pid may be another process's by now
            return
        # The process itself too: just forked, it may not lead its own group yet.
        for kill, target in ((os.killpg, self.pid), (os.kill, self.pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)

    async def close(self) -> None:
        """Kill the process if it still runs, wait for it, and close its socket."""
        self.kill()
        await asyncio.shield(self._exited)
        self._writer.close()

    async def wait_exit(self, grace: float) -> int:
        """Wait up to ``grace`` seconds for the process to exit, then kill it; return its exit code."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._exited), grace)
        except TimeoutError:
            self.kill()
            return await asyncio.shield(self._exited)


class ForkServer:
    """The fork server process: started once (and again if it dies); forks a process per action."""

    def __init__(self, env: Mapping[str, str], python: str = sys.executable) -> None:
        self._env = dict(env)
        self._python = python
        self._process: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None
        self._ready: asyncio.Future[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._forked: dict[int, asyncio.Future[int]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def fill(self) -> None:
        """Start the fork server in the background unless it runs or is starting."""
        if self._closed:
            return
        if self._starting is None or (self._starting.done() and not self._serving()):
            self._starting = asyncio.create_task(self._start())

    def _serving(self) -> bool:
        return (
            self._control is not None
            and self._process is not None
            and self._process.returncode is None
            and self._ready is not None
            and self._ready.done()
            and self._ready.exception() is None
        )

    async def wait_until_full(self) -> None:
        """Wait until the fork server is ready (or starting it failed)."""
        self.fill()
        assert self._starting is not None
        with contextlib.suppress(RunnerProcessError):
            await asyncio.shield(self._starting)

    async def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = await asyncio.create_subprocess_exec(
                self._python,
                "-m",
                "styrmin_backend.agent.prefect._process",
                str(theirs.fileno()),
                str(os.getpid()),
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=self._env,
                # A session of its own: a Ctrl-C meant for `styrmin up` leaves it to the agent to stop.
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        self._process, self._control = process, ours
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._read_control, ours, process)
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            raise
        RUNNER_PROCESSES_READY.set(1)

    def _read_control(self, control: socket.socket, process: asyncio.subprocess.Process) -> None:
        """Take the fork server's messages as they arrive (from the event loop's reader callback)."""
        while True:
            try:
                message = control.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                message = b""
            if not message:
                self._lost(control, process)
                return
            self._take(_protocol.decode(message))

    def _take(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == _protocol.READY:
            if message.get("threads", 1) != 1:
                logger.warning(
                    "The action fork server runs %s threads; forks copy only one.", message["threads"]
                )
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif kind == _protocol.FORKED:
            forked = self._forked.pop(message["id"], None)
            exited = asyncio.get_running_loop().create_future()
            self._exits[message["pid"]] = exited
            if forked is not None and not forked.done():
                forked.set_result(message["pid"])
        elif kind == _protocol.EXITED:
            exit_future = self._exits.pop(message["pid"], None)
            if exit_future is not None and not exit_future.done():
                exit_future.set_result(int(message["returncode"]))

    def _lost(self, control: socket.socket, process: asyncio.subprocess.Process) -> None:
        """The fork server ended: what waited for it learns it; the next action starts a new one."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(control.fileno())
        control.close()
        if self._control is control:
            self._control = None
            RUNNER_PROCESSES_READY.set(0)
        error = RunnerProcessError(
            f"The action fork server (pid {process.pid}) ended; see the agent's log for its output."
        )
        for waiting in [self._ready, *self._forked.values()]:
            if waiting is not None and not waiting.done():
                waiting.set_exception(error)
                waiting.exception()  # whoever still awaits it gets the error; no one may

        self._forked.clear()
        # Its children had Linux kill them with it (their parent-death signal).
        for exited in self._exits.values():
            if not exited.done():
                exited.set_result(_LOST_RETURNCODE)
        self._exits.clear()
        if not self._closed:
            logger.warning("%s It is started again for the next action.", error)

    async def take(self) -> ActionProcess:
        """A new process for one action, forked for it.

        Raises:
            RunnerProcessError: the fork server could not start or died before it forked.
        """
        if not self._serving():
            self.fill()
        assert self._starting is not None
        await asyncio.shield(self._starting)
        control = self._control
        if control is None:
            raise RunnerProcessError("The action fork server ended before it forked the action's process.")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        forked: asyncio.Future[int] = loop.create_future()
        self._forked[request_id] = forked
        try:
            # A packet of a few bytes and a descriptor: the socket never makes it wait.
            socket.send_fds(control, [_protocol.encode(_protocol.FORK, id=request_id)], [theirs.fileno()])
        except OSError as exc:
            self._forked.pop(request_id, None)
            ours.close()
            raise RunnerProcessError(f"The action fork server did not take the request: {exc}") from exc
        finally:
            theirs.close()
        try:
            pid = await forked
        except BaseException:
            ours.close()
            raise
        reader = asyncio.StreamReader(limit=_protocol.MESSAGE_LIMIT)
        transport, protocol = await loop.create_unix_connection(
            lambda: asyncio.StreamReaderProtocol(reader), sock=ours
        )
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        return ActionProcess(pid, reader, writer, self._exits.get(pid) or _already_exited(loop))

    async def replace_ready(self) -> None:
        """Nothing to replace: the fork server holds no connection to the Prefect server."""

    async def close(self) -> None:
        """Stop the fork server (its children, if any still run, die with it)."""
        self._closed = True
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, RunnerProcessError):
                await self._starting
        control, process = self._control, self._process
        if control is not None and process is not None:
            self._lost(control, process)
        if process is not None:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def _already_exited(loop: asyncio.AbstractEventLoop) -> asyncio.Future[int]:
    """The exit of a child the fork server reported ended before its ``forked`` was read (never, in order)."""
    future: asyncio.Future[int] = loop.create_future()
    future.set_result(_LOST_RETURNCODE)
    return future
