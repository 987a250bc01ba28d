"""A Prefect server on loopback, with its own home and SQLite database, for ``styrmin up`` and tests.

In production the agent uses the Prefect server at ``PREFECT_API_URL`` instead.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

_HEALTH_POLL_SECONDS = 0.1

_STOP_WITH_OWNER = """
import ctypes, gc, os, runpy, signal, sys, threading, time

owner = int(sys.argv[1])


def freeze_the_started_objects(*_):
    gc.collect()
    gc.freeze()
    try:  # give the heap that the start freed back to the system
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


signal.signal(signal.SIGUSR1, freeze_the_started_objects)


def stop_when_the_owner_is_gone():
    while os.getppid() == owner:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=stop_when_the_owner_is_gone, daemon=True).start()
from styrmin_backend.agent.prefect._compat import prepare_the_local_server

prepare_the_local_server()
sys.argv = ["prefect", *sys.argv[2:]]
runpy.run_module("prefect", run_name="__main__", alter_sys=True)
"""
"""Runs ``prefect server start ...`` and stops it (SIGTERM, as ``stop`` does) once the process that
started it is gone, even by kill -9: a server left behind would keep its port and its database.
(A thread watches rather than Linux's parent-death signal, which fires when the starting *thread*
ends, and ``start`` may run in a worker thread.)
On SIGUSR1, which ``start`` sends once the server answers, it leaves the objects it made while
starting out of later garbage collections: a full collection walks every object of the process, and
in a started Prefect server that held every request for 0.2 to 0.6 s (seen as a flow run's start
taking that long in an upgrade's timeline)."""


def default_template_dir() -> Path:
    """Where the migrated empty databases of the local Prefect server are kept, one per Prefect version:
    the user's cache folder (``XDG_CACHE_HOME``, else ``~/.cache``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "styrmin" / "prefect-databases"


class PrefectServerError(Exception):
    """The local Prefect server did not start; the message says why and where its log is."""


def _prefect_version() -> str:
    return importlib.metadata.version("prefect")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class LocalPrefectServer:
    """``prefect server start`` as a child process, with its state in ``data_dir``.

    ``data_dir`` becomes the server's ``PREFECT_HOME`` and holds its SQLite database (``prefect.db``)
    and its log (``prefect-server.log``), so runs stay visible across restarts. Its UI is at ``url``.

    Args:
        data_dir: folder for the server's state; created when missing.
        port: port to listen on; 0 picks a free one.
        host: address to listen on; loopback by default, so only this machine reaches it.
        python: the interpreter that runs the server.
        database_url: the server's database (``postgresql+asyncpg://...`` in production); default:
            SQLite in ``data_dir``.
        template_dir: where a migrated empty SQLite database is kept per Prefect version (see
            ``_prepare_database``); default: ``default_template_dir()``.
        settings: more of the server's ``PREFECT_*`` settings (those of the environment are not
            passed on), e.g. ``{"PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true"}``.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        python: str = sys.executable,
        database_url: str | None = None,
        template_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._settings = dict(settings or {})
        self._own_sqlite = database_url is None
        self.database_url = database_url or f"sqlite+aiosqlite:///{self.database_path}"
        self.template_dir = template_dir or default_template_dir()
        self.host = host
        self.port = port or _free_port(host)
        self._python = python
        self._process: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None
        """How long the last ``start`` took, until the API answered its health check."""

    @property
    def url(self) -> str:
        """The server's address; its UI is served here."""
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        """The value of ``PREFECT_API_URL`` for clients of this server."""
        return f"{self.url}/api"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "prefect-server.log"

    @property
    def database_path(self) -> Path:
        """The server's own SQLite database (unused when ``database_url`` names another)."""
        return self.data_dir / "prefect.db"

    @property
    def _version_path(self) -> Path:
        return self.data_dir / "prefect-version"

    def flow_run_url(self, flow_run_id: str) -> str:
        """The page of a flow run in the server's UI."""
        return f"{self.url}/runs/flow-run/{flow_run_id}"

    def start(self, timeout: float = 120.0) -> None:
        """Start the server and return once its API is healthy.

        Raises:
            PrefectServerError: it exited, or was not healthy within ``timeout`` seconds.
        """
        if self._process is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")}
        env |= {
            "PREFECT_HOME": str(self.data_dir),
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": self.database_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "true",
            # Loop services with nothing to do here, each waking the idle server every few seconds:
            # Styrmin makes no Prefect deployments (no schedules), and its flow runs start Running
            # (never late) and never pause. The foreman stays: it marks workers offline.
            "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
            "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED": "false",
            "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_ENABLED": "false",
            # Nor automations, concurrency leases or Prefect workers' cleanup messages.
            "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
            "PREFECT_SERVER_SERVICES_REPOSSESSOR_ENABLED": "false",
            "PREFECT_SERVER_SERVICES_CLEANUP_RECONCILER_ENABLED": "false",
            # Fewer malloc arenas for its threads: less memory held, for the same work.
            "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
        }
        env |= self._settings
        started = time.monotonic()
        migrate = self._prepare_database(env, started + timeout)
        env["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] = "true" if migrate else "false"
        command = [
            *(self._python, "-c", _STOP_WITH_OWNER, str(os.getpid())),
            *("server", "start", "--host", self.host, "--port", str(self.port)),
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self._wait_healthy(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        self._process.send_signal(signal.SIGUSR1)  # see _STOP_WITH_OWNER
        if migrate and self._own_sqlite:
            self._version_path.write_text(_prefect_version())  # its migrations ran: at this version's head

    def _prepare_database(self, env: dict[str, str], deadline: float) -> bool:
        """Give the server's own SQLite database this Prefect version's schema; whether the server must
        still migrate it when it starts.

        A new database is a copy of a migrated empty one, made once per Prefect version in
        ``template_dir`` by ``prefect server database upgrade`` in a process of its own. Migrating in
        the server's process instead costs each new data folder about 7 s of CPU and leaves the
        migration code (Alembic and Prefect's scripts, about 35 MB) in the server's memory for good. A
        database that the server migrated, or that was copied, at this Prefect version is noted in
        ``prefect-version`` and is not migrated again; one of another version is (on start, by Prefect).
        Another database (``database_url``), or a template that cannot be made, is migrated on start.
        """
        if not self._own_sqlite:
            return True
        version = _prefect_version()
        if self.database_path.exists():
            noted = self._version_path.read_text().strip() if self._version_path.exists() else None
            return noted != version
        template = self.template_dir / f"prefect-{version}.db"
        try:
            if not template.exists():
                self._make_template(template, env, deadline)
            copy = self.database_path.with_suffix(".db.copying")
            shutil.copyfile(template, copy)
            copy.replace(self.database_path)
        except (OSError, subprocess.SubprocessError, sqlite3.Error) as error:
            with self.log_path.open("a") as log:
                log.write(f"Styrmin: no migrated database to copy ({error}); the server migrates its own.\n")
            return True
        self._version_path.write_text(version)
        return False

    def _make_template(self, template: Path, env: dict[str, str], deadline: float) -> None:
        """Migrate an empty database into ``template`` (written whole, or not at all)."""
        template.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=template.parent, prefix=".making-") as home:
            database = Path(home) / "prefect.db"
            with self.log_path.open("ab") as log:
                subprocess.run(
                    [self._python, "-m", "prefect", "server", "database", "upgrade", "--yes"],
                    env={
                        **env,
                        "PREFECT_HOME": home,
                        "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{database}",
                    },
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=max(1.0, deadline - time.monotonic()),
                    check=True,
                )
            # Fold the write-ahead log into the file, so that the file alone is the whole database.
            with contextlib.closing(sqlite3.connect(database)) as connection:
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                connection.execute("PRAGMA journal_mode=DELETE")
            database.replace(template)

    def _wait_healthy(self, deadline: float) -> None:
        assert self._process is not None
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self._process.poll() is not None:
                    raise PrefectServerError(
                        f"The local Prefect server exited with code {self._process.returncode} while "
                        f"starting; see its log at {self.log_path}."
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise PrefectServerError(
                        f"The local Prefect server did not answer at {self.api_url} in time; "
                        f"see its log at {self.log_path}."
                    )
                time.sleep(_HEALTH_POLL_SECONDS)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server: ask it to shut down, and kill it after ``timeout`` seconds."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The exit code of the server when it was started and has exited by itself; None otherwise."""
        return None if self._process is None else self._process.poll()

    def restart(self, timeout: float = 120.0) -> None:
        """Start the server again on the same port and data dir, once it has exited (or a start failed).

        Raises:
            PrefectServerError: it did not start again.
        """
        if self._process is not None and self._process.poll() is not None:
            self._process = None
        self.start(timeout)

    def __enter__(self) -> LocalPrefectServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
