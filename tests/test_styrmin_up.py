"""`styrmin up` and `styrmin server` as a user runs them: a real process serving on loopback."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running(command: str, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", command, "--port", str(port)],
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            process.kill()
            raise AssertionError(process.communicate()[0])
        yield url, process
    finally:
        process.terminate()
        process.wait(10)


def test_up_prints_a_generated_admin_password_once_and_keeps_it_private(tmp_path: Path) -> None:
    env = {"STYRMIN_DATA_DIR": str(tmp_path)}
    with running("up", env) as (url, process):
        login = httpx.post(
            f"{url}/api/v1/auth/login",
            json={"username": "admin", "password": (tmp_path / "admin-password.txt").read_text().strip()},
        )
        assert login.status_code == 201
    output = process.stdout.read() if process.stdout else ""
    password = (tmp_path / "admin-password.txt").read_text().strip()
    assert password in output
    assert f"{url}" in output
    assert stat.S_IMODE((tmp_path / "admin-password.txt").stat().st_mode) == 0o600
    assert "Loaded the example driver shop@1.0.0" in output
    assert "Prefect UI: http://127.0.0.1:" in output and "KUBECONFIG=" in output
    with running("server", env) as (_url, again):
        pass
    assert password not in (again.stdout.read() if again.stdout else "")


def test_server_runs_on_postgresql_with_the_admin_password_from_the_environment(tmp_path: Path) -> None:
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
        }
        with running("server", env) as (url, _process):
            login = httpx.post(
                f"{url}/api/v1/auth/login", json={"username": "admin", "password": "chosen-by-the-operator"}
            )
            assert login.status_code == 201
            me = httpx.get(
                f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {login.json()['token']}"}
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
