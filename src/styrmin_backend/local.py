"""Styrmin on one machine: the embedded local cluster, a local Prefect server, the server and an agent.

``styrmin up`` and the driver author's test harness both start Styrmin through :func:`run_locally`.
This is the one module of styrmin_backend that imports styrmin_localcluster: everything else,
the agent included, reaches the cluster only through the kubeconfig the local cluster writes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from styrmin_backend.agent.prefect import LocalPrefectServer, PrefectServerError
from styrmin_backend.agent.process import AgentProcessStart, RelayedLine, log_levels_to_relay, relay
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.api.serving import announce_stop, server_config
from styrmin_backend.bootstrap import Prepared, prepare_database
from styrmin_backend.data_dir import make_data_dir_private
from styrmin_backend.server_app import create_app
from styrmin_backend.services import agents
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_session_factory, transaction
from styrmin_localcluster import LocalCluster

log = logging.getLogger("styrmin.local")

LOCAL_CLUSTER = "local"
"""The cluster name of the embedded cluster, and of the agent that serves it."""


@dataclass(frozen=True)
class LocalStyrmin:
    """A running Styrmin on this machine and where to reach its parts."""

    url: str
    """The server's URL (web UI and API)."""
    prepared: Prepared
    """The migrated database and, on its first start, the admin that was made."""
    cluster: LocalCluster
    """The embedded cluster: ``kubeconfig_path`` to reach it, ``data_dir`` for what its pods write."""
    prefect: LocalPrefectServer
    """The Prefect server the actions run on; its UI is at ``prefect.url``."""
    serving: _Serving

    @property
    def alive(self) -> bool:
        """True while the server and the agent run."""
        return self.serving.alive

    def wait_until_warm(self, timeout: float) -> bool:
        """Wait until the agent's action fork server is ready, so that actions start at once."""
        return self.serving.agent.warm.wait(timeout)


def hand_over(stdin: IO[bytes], message: bytes) -> bool:
    """Write ``message`` to a child's stdin and close it; False if the child had ended already.

    An agent killed before it read its settings leaves a broken pipe. That is not an error of its
    starter: the relay logs that the agent ended, and ``styrmin up`` stops as it would later on.
    """
    try:
        with stdin:
            stdin.write(message)
    except BrokenPipeError:
        return False
    return True


class _AgentProcess:
    """The agent in a process of its own (``python -m styrmin_backend.agent``, see ``agent.process``).

    Apart, so that the server and the agent each have an interpreter lock: in one process, each
    request the agent sent waited for the server's answer to give the lock back. Its log records
    come back on a pipe and are logged here, as this process logs (see ``agent.process``).
    """

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.warm = threading.Event()
        """Set once the agent's action fork server is ready (or the process ended)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._relaying: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        start = AgentProcessStart(settings=self.settings, log_levels=log_levels_to_relay())
        ours, theirs = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "styrmin_backend.agent", str(os.getpid()), str(theirs)],
                stdin=subprocess.PIPE,
                pass_fds=(theirs,),
                # A session of its own: a Ctrl-C meant for `styrmin up` leaves it to this process to
                # stop the agent (SIGTERM, once the server has told its claims to end).
                start_new_session=True,
            )
        except BaseException:
            os.close(ours)
            raise
        finally:
            os.close(theirs)
        self._relaying = threading.Thread(
            target=self._relay, args=(ours,), name="styrmin-agent-logs", daemon=True
        )
        self._relaying.start()
        assert self._process.stdin is not None
        hand_over(self._process.stdin, start.model_dump_json().encode())

    def _relay(self, fd: int) -> None:
        with open(fd, encoding="utf-8", errors="replace") as lines:
            for text in lines:
                try:
                    line = RelayedLine.model_validate_json(text)
                except ValueError:
                    log.warning("The agent process wrote a line that is not a log record: %r", text[:200])
                    continue
                if line.warm:
                    self.warm.set()
                    continue
                try:
                    relay(line)
                except Exception:  # keep reading whatever a handler does: a full pipe would stall the agent
                    log.exception("Could not log a record of the agent process")
        self.warm.set()  # it ended: nobody waits for it any longer
        if not self._stopping and self._process is not None:
            with suppress(subprocess.TimeoutExpired):
                code = self._process.wait(10)
                log.error("The agent process ended by itself (exit code %s): Styrmin stops.", code)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float) -> None:
        """Stop the agent as SIGTERM stops ``styrmin agent`` (its running tasks end first), within
        ``timeout`` seconds; then kill it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            self._stopping = True  # else it ended by itself, and the relay says so
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("The agent did not stop within %.0f s; killing it.", timeout)
                process.kill()
                process.wait()
        if self._relaying is not None:
            self._relaying.join(10)


class _Serving:
    """The server (uvicorn, on an event loop in a thread of its own) and the agent's process."""

    def __init__(self, app: FastAPI, settings: Settings, agent_settings: AgentSettings) -> None:
        self.url = settings.effective_public_url
        self._app = app
        self._server = uvicorn.Server(
            server_config(
                app,
                settings,
                access_log=False,  # the agent polls all the time: access lines would drown the rest
                log_config=None,  # keep the log format the process set (configure_logging)
            )
        )
        self.agent = _AgentProcess(agent_settings)
        # In a thread, uvicorn leaves the signals to the main thread.
        self._server_thread = threading.Thread(target=self._server.run, name="styrmin-server", daemon=True)

    @property
    def alive(self) -> bool:
        return self._server_thread.is_alive() and self.agent.alive

    def start(self) -> None:
        """Start serving; returns once the server accepts requests (the agent starts beside it)."""
        self._server_thread.start()
        while not self._server.started:
            if not self._server_thread.is_alive():
                raise RuntimeError(f"The Styrmin server did not start on {self.url}; see the log above.")
            time.sleep(0.05)
        self.agent.start()

    def stop(self) -> None:
        """Stop the agent once its running tasks have ended, then the server."""
        announce_stop(self._app)  # the agent's claim (a long poll) answers at once
        self.agent.stop(60)
        self._server.should_exit = True
        self._server_thread.join(30)


def _stop_side_by_side(*stops: Callable[[], None]) -> None:
    """Call each of ``stops`` in a thread of its own and wait for all (each bounds its own wait)."""
    threads = [threading.Thread(target=stop, name="styrmin-stop") for stop in stops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


_PREFECT_RESTART_TIMEOUT_SECONDS = 300.0


class _PrefectSupervisor:
    """Starts the local Prefect server again whenever it exits by itself (crash, OOM kill, kill -9).

    The agent meanwhile claims no task that would need it, and serves again once it answers.
    """

    def __init__(self, prefect: LocalPrefectServer, check_seconds: float = 1.0) -> None:
        self._prefect = prefect
        self._check_seconds = check_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="styrmin-prefect-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)

    def _watch(self) -> None:
        while not self._stop.wait(self._check_seconds):
            if self._prefect.running:
                continue
            log.warning(
                "The local Prefect server is not running (exit code %s); starting it again at %s (its log: %s).",
                self._prefect.exit_code,
                self._prefect.url,
                self._prefect.log_path,
            )
            try:
                # A loaded machine can take minutes to start it; a start that fails is tried again.
                self._prefect.restart(timeout=_PREFECT_RESTART_TIMEOUT_SECONDS)
            except PrefectServerError as error:  # tried again on the next round
                log.error("%s", error)
            else:
                log.warning("The local Prefect server is back at %s.", self._prefect.url)


@contextmanager
def run_locally(
    settings: Settings,
    *,
    catalogs: Sequence[Path] = (),
    keep_cluster_state: bool = False,
    prefect_port: int = 0,
    agent_options: Mapping[str, Any] | None = None,
    prepared: Prepared | None = None,
) -> Iterator[LocalStyrmin]:
    """Start everything in ``settings.data_dir`` (``cluster/``, ``prefect/``, ``agent/``, the database).

    Args:
        settings: the server's settings; ``prefect_ui_url`` and, when unset, ``public_url`` are
            filled in here.
        catalogs: image catalog folders: how the local cluster runs each image (see docs/localcluster.md).
        keep_cluster_state: keep the cluster's objects across restarts (``styrmin up``), in
            ``cluster/state.json``.
        prefect_port: the Prefect server's port; 0 picks a free one.
        agent_options: agent settings besides its server, key, kubeconfig, Prefect and data dir
            (``poll_seconds``, ``lease_seconds``, ...).
        prepared: the database, when the caller prepared it already (see ``bootstrap``).

    Stops it all on exit: the server, then the agent, Prefect and the cluster.
    """
    data = settings.data_dir
    make_data_dir_private(data)
    with ExitStack() as stack:
        cluster = stack.enter_context(
            LocalCluster(
                data / "cluster",
                [Path(c) for c in catalogs],
                state_file=data / "cluster" / "state.json" if keep_cluster_state else None,
            )
        )
        prefect = LocalPrefectServer(data / "prefect", port=prefect_port)
        # A loaded machine (a shared CI runner) can take two minutes to start Prefect; waiting
        # longer costs nothing when it is fast.
        prefect.start(timeout=300)
        # Once the server, the agent and the supervisor are stopped, Prefect and the cluster stop side by side.
        stack.callback(_stop_side_by_side, prefect.stop, cluster.stop)
        supervisor = _PrefectSupervisor(prefect)
        supervisor.start()
        stack.callback(supervisor.stop)
        make_data_dir_private(data)
        settings.prefect_ui_url = prefect.url
        settings.public_url = settings.effective_public_url
        if prepared is None:
            prepared = prepare_database(settings)
            stack.callback(prepared.engine.dispose)
        with transaction(make_session_factory(prepared.engine)) as session:
            key = agents.rotate_agent_key(session, "local", LOCAL_CLUSTER)
        agent_settings = AgentSettings(
            server_url=settings.effective_public_url,
            key=SecretStr(key),
            kubeconfig=cluster.kubeconfig_path,
            prefect_api_url=prefect.api_url,
            data_dir=data / "agent",
            **dict(agent_options or {}),
        )
        serving = _Serving(create_app(settings, prepared.engine), settings, agent_settings)
        serving.start()
        stack.callback(serving.stop)
        yield LocalStyrmin(settings.effective_public_url, prepared, cluster, prefect, serving)
