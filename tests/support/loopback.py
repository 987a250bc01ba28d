"""This machine's loopback for tests: a free port, and an app served by uvicorn in a thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.support.waiting import wait_for


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the test process keeps its own handlers
        pass


@contextmanager
def served(app: Any, start_seconds: float = 60) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port for the ``with`` block; yields its URL."""
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: server.started or not thread.is_alive(),
            timeout=start_seconds,
            message=f"the server on port {port} to start",
        )
        assert server.started, f"the server on port {port} ended before it started (its log is above)"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
