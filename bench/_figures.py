"""What the benchmark scripts share: percentiles, a free port, and `styrmin server` on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import httpx
from cryptography.fernet import Fernet


def percentile(values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


BENCH_SECRET_KEY = Fernet.generate_key().decode()
"""The key of secret values for the servers of one bench run (a server on PostgreSQL needs one)."""


@contextmanager
def styrmin_server(env: Mapping[str, str]) -> Iterator[str]:
    """``styrmin server`` (one process, as in production) on a free loopback port; yields its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", "server", "--port", str(port)],
        env={**os.environ, "STYRMIN_LOG_LEVEL": "WARNING", "STYRMIN_SECRET_KEY": BENCH_SECRET_KEY, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts it slowly
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a request still keeps it busy
            process.kill()
            process.wait()
