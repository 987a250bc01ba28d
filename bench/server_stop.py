"""How long `styrmin server` takes to exit after SIGTERM when idle, and with an agent's long poll open.

Usage: uv run python bench/server_stop.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _figures import free_port

TARGET_SECONDS = 2.0
ADMIN_PASSWORD = "bench-admin-password"  # noqa: S105 (a throwaway admin of a throwaway database)


def _start(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STYRMIN")}
    process = subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", "server", "--port", str(port)],
        env={**env, "STYRMIN_DATA_DIR": str(data_dir), "STYRMIN_ADMIN_PASSWORD": ADMIN_PASSWORD},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return process, url
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise
        time.sleep(0.2)


def _stop_seconds(process: subprocess.Popen[bytes]) -> float:
    started = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    return time.perf_counter() - started


def _agent_key(url: str) -> str:
    token = httpx.post(
        f"{url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
    ).json()["token"]
    made = httpx.post(
        f"{url}/api/v1/agents",
        json={"name": f"bench-{time.monotonic_ns()}", "cluster": "bench"},
        headers={"Authorization": f"Bearer {token}"},
    )
    made.raise_for_status()
    key: str = made.json()["key"]
    return key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    idle: list[float] = []
    polled: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch)
        _stop_seconds(_start(data_dir)[0])  # warm-up: migrations and imports cached
        for _ in range(rounds):
            process, _url = _start(data_dir)
            idle.append(_stop_seconds(process))
        for _ in range(rounds):
            process, url = _start(data_dir)
            key = _agent_key(url)

            def long_poll(url: str = url, key: str = key) -> None:
                httpx.post(
                    f"{url}/api/v1/agent/claim",
                    json={"lease_seconds": 30, "wait_seconds": 30},
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=60,
                )

            poll = threading.Thread(target=long_poll)
            poll.start()
            time.sleep(0.5)
            polled.append(_stop_seconds(process))
            poll.join(60)
    print(f"server stop, idle: median {statistics.median(idle):.2f} s  (target <= {TARGET_SECONDS:.0f} s)")
    print(
        f"server stop, agent long poll open: median {statistics.median(polled):.2f} s  "
        f"(target <= {TARGET_SECONDS:.0f} s)"
    )


if __name__ == "__main__":
    main()
