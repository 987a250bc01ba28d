"""The agent in a process of its own, beside the server that started it (``styrmin up``, the harness).

A server and an agent in one process share one interpreter lock: every request the agent sent
waited for the server's answer to get it back, and two upgrades at once ran on one core's worth of
Python. ``styrmin_backend.local`` starts it as ``python -m styrmin_backend.agent``, in a session of
its own:

- its settings come on stdin, one JSON document (``AgentProcessStart``), so that the agent's key is
  in no command line and no environment;
- its log records go back to the process that started it, one JSON line each (``RelayedLine``) on
  the file descriptor the command line names, and that process logs them as its own (its format,
  its redaction, its handlers: a terminal, or a test's captured logs);
- on the same pipe, one line says when the agent is warm (its action fork server is ready);
- SIGTERM stops it as it stops ``styrmin agent``: no new claims, the running tasks end first. A
  Ctrl-C is for the process that started it, which sends SIGTERM; and it dies with that process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import IO, Any

from pydantic import BaseModel, field_serializer

from styrmin_backend.agent.lifetime import die_with
from styrmin_backend.agent.settings import AgentSettings


class AgentProcessStart(BaseModel):
    """What the agent process reads on stdin: its settings, and the log levels to relay at."""

    settings: AgentSettings
    log_levels: dict[str, int]
    """Logger name ("" for the root) -> the level this process logs it at."""

    @field_serializer("settings")
    def _with_the_key(self, settings: AgentSettings) -> dict[str, Any]:
        # Only on the pipe to the agent process: everywhere else the key stays masked.
        return {**settings.model_dump(mode="json"), "key": settings.key.get_secret_value()}


class RelayedLine(BaseModel):
    """One line from the agent process: a log record, or the news that the agent is warm."""

    warm: bool = False
    name: str = ""
    levelno: int = logging.INFO
    message: str = ""
    exc_text: str | None = None
    created: float = 0.0
    thread_name: str = ""

    def record(self) -> logging.LogRecord:
        """The log record as the agent process made it, for the process that started it to log."""
        record = logging.makeLogRecord(
            {
                "name": self.name,
                "levelno": self.levelno,
                "levelname": logging.getLevelName(self.levelno),
                "msg": self.message,
                "exc_text": self.exc_text,
                "created": self.created,
                "msecs": (self.created - int(self.created)) * 1000,
                "threadName": self.thread_name,
            }
        )
        return record


def log_levels_to_relay(logger_names: tuple[str, ...] = ("httpx", "httpx2")) -> dict[str, int]:
    """The levels the agent process should log at, from this process's loggers now: the root's, but
    at least INFO (a test may lower its level later, as ``caplog.set_level`` does, and this process
    filters what arrives), and each of ``logger_names`` that has a level of its own."""
    levels = {"": min(logging.getLogger().getEffectiveLevel(), logging.INFO)}
    for name in logger_names:
        level = logging.getLogger(name).level
        if level != logging.NOTSET:
            levels[name] = level
    return levels


def relay(line: RelayedLine) -> None:
    """Log a relayed record in this process, as its logger would have logged it here."""
    logger = logging.getLogger(line.name)
    if logger.isEnabledFor(line.levelno):
        logger.handle(line.record())


class _Relay(logging.Handler):
    """Writes each record, and the warm line, to the pipe of the process that started this one."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self._stream = stream
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc_text = self._formatter.formatException(record.exc_info) if record.exc_info else None
            line = RelayedLine(
                name=record.name,
                levelno=record.levelno,
                message=record.getMessage(),
                exc_text=exc_text or record.exc_text,
                created=record.created,
                thread_name=record.threadName or "",
            )
            self._write(line)
        except Exception:  # a logging call never raises
            self.handleError(record)

    def say_warm(self) -> None:
        self.acquire()
        try:
            self._write(RelayedLine(warm=True))
        finally:
            self.release()

    def _write(self, line: RelayedLine) -> None:
        self._stream.write(line.model_dump_json() + "\n")
        self._stream.flush()


def _relay_logs(start: AgentProcessStart, stream: IO[str]) -> _Relay:
    handler = _Relay(stream)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    for name, level in start.log_levels.items():
        logging.getLogger(name or None).setLevel(level)
    return handler


async def _run(start: AgentProcessStart, relay_handler: _Relay) -> None:
    from styrmin_backend.agent.loop import Agent

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    agent = Agent(start.settings)

    async def say_when_warm() -> None:
        await asyncio.to_thread(agent.warm.wait)
        relay_handler.say_warm()

    telling = asyncio.create_task(say_when_warm())
    try:
        await agent.run(stop)
    finally:
        telling.cancel()
        agent.warm.set()  # the thread that waits for it ends


def main(argv: list[str]) -> int:
    """``python -m styrmin_backend.agent <parent pid> <relay fd>``, settings on stdin."""
    die_with(int(argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    start = AgentProcessStart.model_validate_json(sys.stdin.buffer.read())
    stream = os.fdopen(int(argv[2]), "w", encoding="utf-8")
    relay_handler = _relay_logs(start, stream)
    asyncio.run(_run(start, relay_handler))
    with contextlib.suppress(OSError):
        stream.close()
    return 0
