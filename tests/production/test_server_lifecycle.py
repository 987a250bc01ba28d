"""`styrmin server` as a cluster runs it: probes, metrics, JSON logs, and a graceful stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.loopback import free_port

ADMIN_PASSWORD = "admin-password-for-tests"


class ServerProcess:
    """A `styrmin server` process on a free loopback port, its stderr collected line by line."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("STYRMIN")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "styrmin_backend.cli", "server", "--port", str(self.port)],
            env={
                **base,
                "STYRMIN_DATA_DIR": str(data_dir),
                "STYRMIN_ADMIN_PASSWORD": ADMIN_PASSWORD,
                **env,
            },
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "\n".join(self.lines)
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError("the server did not become ready:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(60)
        self._reader.join(10)
        return code


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", {"STYRMIN_LOG_FORMAT": "json"})
    try:
        process.wait_ready()
        yield process
    finally:
        if process.process.poll() is None:
            process.process.kill()
            process.process.wait(30)


@pytest.mark.slow
def test_sigterm_finishes_a_request_in_flight_and_exits(server: ServerProcess) -> None:
    admin = httpx.post(
        f"{server.url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
    ).json()["token"]
    made = httpx.post(
        f"{server.url}/api/v1/agents",
        json={"name": "edge", "cluster": "edge"},
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    answers: list[httpx.Response] = []

    def long_poll() -> None:
        answers.append(
            httpx.post(
                f"{server.url}/api/v1/agent/claim",
                json={"lease_seconds": 30, "wait_seconds": 30},
                headers={"Authorization": f"Bearer {key}"},
                timeout=60,
            )
        )

    polling = threading.Thread(target=long_poll)
    polling.start()
    time.sleep(1)  # the claim is waiting on the server
    # uvicorn ends by re-raising the signal it caught, as a process killed by SIGTERM would.
    assert server.stop() in (0, -signal.SIGTERM), "\n".join(server.lines)
    assert "Finished server process" in server.lines[-1]
    polling.join(60)
    # The agent's long poll got its answer (nothing to do) instead of a dropped connection.
    assert [answer.status_code for answer in answers] == [204]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz")


@pytest.mark.slow
def test_json_logs_are_one_object_a_line_with_secrets_redacted(server: ServerProcess) -> None:
    httpx.get(f"{server.url}/healthz", params={"token": "s3cr3t-value-never-logged"})
    server.stop()
    entries = [json.loads(line) for line in server.lines if line.strip()]
    assert entries, "the server logged nothing"
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    assert any("serves on" in entry["message"] for entry in entries)
    access = [entry for entry in entries if "/healthz" in entry["message"]]
    assert access, entries
    assert "s3cr3t-value-never-logged" not in "\n".join(server.lines)
    assert "<redacted>" in access[0]["message"]
