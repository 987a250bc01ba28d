"""`styrmin up` and `styrmin server` as a user runs them: a real process serving on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from styrmin_backend.local import hand_over
from tests.support.loopback import free_port

pytestmark = pytest.mark.slow


# Generous waits: a loaded machine starts and stops Prefect and the local cluster slowly, and a stop
# lets a running create end first. How fast it is lives in bench/cli_start.py.
START_SECONDS = 300
STOP_SECONDS = 300


@dataclass
class Run:
    """A `styrmin` process; its output (stdout and stderr) goes to a file, as under nohup or in CI."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def output(self) -> str:
        return self.log.read_text()


@contextmanager
def running(command: str, env: dict[str, str], log: Path) -> Iterator[Run]:
    port = free_port()
    # No COLUMNS: the output is a file, as it is for a user who sends it to one.
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "styrmin_backend.cli", command, "--port", str(port)],
            env={**environment, "NO_COLOR": "1", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    run = Run(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{run.url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            process.kill()
            process.wait()
            raise AssertionError(run.output)
        yield run
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"{command} did not stop in {STOP_SECONDS} s:\n{run.output}") from None


def _lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines()]


def test_up_prints_how_to_reach_it_whole_on_lines_of_their_own_and_keeps_the_password_private(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    # Lines longer than the 80 columns that output to a file used to be wrapped at.
    assert len(f"export KUBECONFIG={data / 'cluster' / 'kubeconfig'}") > 80
    env = {"STYRMIN_DATA_DIR": str(data)}
    with running("up", env, tmp_path / "up.log") as up:
        login = httpx.post(
            f"{up.url}/api/v1/auth/login",
            json={"username": "admin", "password": (data / "admin-password.txt").read_text().strip()},
        )
        assert login.status_code == 201
    assert up.process.returncode == 0, up.output
    lines = _lines(up.output)
    password = (data / "admin-password.txt").read_text().strip()
    assert password in lines
    assert up.url in lines and f"{up.url}/api/docs" in lines
    assert str(data / "admin-password.txt") in lines
    assert f"export KUBECONFIG={data / 'cluster' / 'kubeconfig'}" in lines
    assert any(re.fullmatch(r"http://127\.0\.0\.1:\d+", line) for line in lines[lines.index("Prefect UI:") :])
    assert stat.S_IMODE((data / "admin-password.txt").stat().st_mode) == 0o600
    assert "Loaded the example driver shop@1.0.0." in lines
    # The next command to run, whole, after everything else it printed on start.
    assert (
        f"uv run --no-dev styrminctl login {up.url} -u admin --password-stdin < {data / 'admin-password.txt'}"
        in lines
    )
    assert "uv run --no-dev styrminctl deployments create shop1 --driver shop --wait" in lines
    assert "Stopping Styrmin: no task runs; stopping the agent, Prefect and the local cluster." in lines
    assert lines[-1] == "Styrmin stopped."
    with running("server", env, tmp_path / "server.log") as again:
        pass
    assert password not in again.output


def test_up_stopped_while_a_task_runs_says_which_it_waits_for(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running("up", {"STYRMIN_DATA_DIR": str(data)}, tmp_path / "up.log") as up:
        password = (data / "admin-password.txt").read_text().strip()
        token = httpx.post(
            f"{up.url}/api/v1/auth/login", json={"username": "admin", "password": password}
        ).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        created = httpx.post(
            f"{up.url}/api/v1/deployments",
            json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
            headers=headers,
        )
        assert created.status_code == 202, created.text
        task_id = created.json()["task"]["id"]
        deadline = time.monotonic() + 180
        while httpx.get(f"{up.url}/api/v1/tasks/{task_id}", headers=headers).json()["status"] == "pending":
            assert time.monotonic() < deadline, up.output
            time.sleep(0.2)
        up.process.send_signal(signal.SIGINT)
    assert up.process.returncode == 0, up.output
    assert f"waiting for 1 running task(s) to end: task #{task_id} (create of shop)." in up.output
    assert _lines(up.output)[-1] == "Styrmin stopped."


def test_server_runs_on_postgresql_with_the_admin_password_from_the_environment(tmp_path: Path) -> None:
    from cryptography.fernet import Fernet

    from tests.conftest import _pg_admin, _pg_url

    name = f"styrmin_up_{os.getpid()}"
    with _pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {
            "STYRMIN_DATA_DIR": str(tmp_path),
            "STYRMIN_DATABASE_URL": _pg_url(name),
            "STYRMIN_ADMIN_PASSWORD": "chosen-by-the-operator",
            "STYRMIN_SECRET_KEY": Fernet.generate_key().decode(),
        }
        with running("server", env, tmp_path / "server.log") as server:
            login = httpx.post(
                f"{server.url}/api/v1/auth/login",
                json={"username": "admin", "password": "chosen-by-the-operator"},
            )
            assert login.status_code == 201
            me = httpx.get(
                f"{server.url}/api/v1/whoami", headers={"Authorization": f"Bearer {login.json()['token']}"}
            )
            assert me.json()["role"] == "admin"
        assert not (tmp_path / "admin-password.txt").exists()
    finally:
        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_db_upgrade_migrates_an_empty_database(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "styrmin_backend.cli", "db", "upgrade"],
        env={**os.environ, "STYRMIN_DATA_DIR": str(tmp_path), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"schema is current", result.stderr + result.stdout)
    assert (tmp_path / "styrmin.db").exists()


def test_up_logs_one_json_object_a_line_when_asked_as_the_server_does(tmp_path: Path) -> None:
    env = {
        "STYRMIN_DATA_DIR": str(tmp_path / "data"),
        "STYRMIN_LOG_FORMAT": "json",
        "STYRMIN_LOG_LEVEL": "INFO",
    }
    with running("up", env, tmp_path / "up.log") as up:
        httpx.get(f"{up.url}/healthz")
    entries = [json.loads(line) for line in _lines(up.output) if line.startswith("{")]
    # The web server's own lines (uvicorn's) come through the same JSON log, not a format of their own.
    assert any(entry["logger"].startswith("uvicorn") for entry in entries), up.output
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    assert not [line for line in _lines(up.output) if re.match(r"(INFO|WARNING|ERROR):\s", line)], up.output


def test_up_stops_with_an_error_when_its_agent_process_dies(tmp_path: Path) -> None:
    with running("up", {"STYRMIN_DATA_DIR": str(tmp_path / "data")}, tmp_path / "up.log") as up:
        # The server answers before the agent process starts: wait for it, generously.
        deadline = time.monotonic() + START_SECONDS
        while not (agents := _agent_processes(up.process.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(agents) == 1, up.output
        os.kill(agents[0], signal.SIGKILL)
        up.process.wait(STOP_SECONDS)
    assert up.process.returncode == 1, up.output
    assert "The agent process ended by itself (exit code -9): Styrmin stops." in up.output
    assert _lines(up.output)[-1] == "Styrmin stopped."


def test_an_agent_that_ended_before_it_read_its_settings_leaves_its_starter_going() -> None:
    # Killed between its start and its first read, the agent left `styrmin up` a broken pipe, which
    # ended it at once with exit code 1 and without a word (click's handling of EPIPE).
    ended, alive = os.pipe(), os.pipe()
    os.close(ended[0])
    with os.fdopen(ended[1], "wb") as to_the_ended, os.fdopen(alive[0], "rb") as reader:
        assert hand_over(to_the_ended, b'{"settings": {}}') is False
        assert to_the_ended.closed
        to_the_living = os.fdopen(alive[1], "wb")
        assert hand_over(to_the_living, b'{"settings": {}}') is True
        assert reader.read() == b'{"settings": {}}'


def _agent_processes(parent: int) -> list[int]:
    """The `python -m styrmin_backend.agent` children of `parent`."""
    children = [
        pid
        for task in Path(f"/proc/{parent}/task").iterdir()
        for pid in (task / "children").read_text().split()
    ]
    agents = []
    for pid in children:
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3]
        except FileNotFoundError:  # a child that ended since it was listed
            continue
        if arguments == [b"-m", b"styrmin_backend.agent"]:
            agents.append(int(pid))
    return agents
