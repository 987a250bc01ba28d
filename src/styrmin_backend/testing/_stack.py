"""The whole of Styrmin in one test process: server on loopback, local cluster, Prefect server, agent."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from lightkube import Client as KubeClient
from lightkube import KubeConfig
from pydantic import SecretStr

import styrmin
from styrmin_backend.agent.loop import Agent
from styrmin_backend.agent.prefect import LocalPrefectServer
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.api import create_app
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.drivers import SPEC_FILE_NAME
from styrmin_backend.services import agents
from styrmin_backend.services.users import ensure_admin
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_engine, make_session_factory, transaction
from styrmin_backend.store.migrate import upgrade_database
from styrmin_localcluster import LocalCluster

DEFAULT_TIMEOUT_SECONDS = 300.0
"""How long the harness waits for a task by default."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class StyrminStack:
    """A running Styrmin for tests, driven as an operator drives it: through the Python SDK.

    ``client`` is a ``styrmin.Client`` signed in as admin, ``kube`` a lightkube client of the local
    cluster, ``cluster`` the local cluster itself (its ``data_dir`` holds what pods write), ``url`` the
    server's and ``prefect_ui_url`` the Prefect UI's address.
    Start it with :meth:`start` (a context manager) or the ``styrmin_stack`` pytest fixture.
    """

    def __init__(
        self, client: styrmin.Client, kube: KubeClient, cluster: LocalCluster, url: str, prefect_ui_url: str
    ) -> None:
        self.client = client
        self.kube = kube
        self.cluster = cluster
        self.url = url
        self.prefect_ui_url = prefect_ui_url

    @classmethod
    @contextmanager
    def start(cls, work_dir: Path, catalogs: Sequence[Path] = ()) -> Iterator[StyrminStack]:
        """Start everything under ``work_dir``; image catalogs ``catalogs`` say how pods run locally.

        Stops it all on exit. Takes a few seconds: share one per test session.
        """
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            cluster = stack.enter_context(LocalCluster(work_dir / "cluster", [Path(c) for c in catalogs]))
            prefect = LocalPrefectServer(work_dir / "prefect")
            prefect.start()
            stack.callback(prefect.stop)
            password = secrets.token_urlsafe(16)
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            settings = Settings(
                data_dir=work_dir / "server",
                port=port,
                public_url=url,
                admin_password=SecretStr(password),
                log_level="WARNING",
                prefect_ui_url=prefect.url,
            )
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            engine = make_engine(settings.effective_database_url)
            stack.callback(engine.dispose)
            upgrade_database(engine)
            with transaction(make_session_factory(engine)) as session:
                ensure_admin(session, password, settings.data_dir)
                _, key = agents.create_agent(session, "local", "local")
            server = uvicorn.Server(
                uvicorn.Config(create_app(settings, engine), host="127.0.0.1", port=port, log_level="warning")
            )
            server_thread = threading.Thread(target=server.run, name="styrmin-server", daemon=True)
            server_thread.start()
            stack.callback(server_thread.join, 10)
            stack.callback(setattr, server, "should_exit", True)
            while not server.started:
                if not server_thread.is_alive():
                    raise RuntimeError(f"The Styrmin server did not start on {url}; see the log above.")
                time.sleep(0.05)
            agent_settings = AgentSettings(
                server_url=url,
                key=SecretStr(key),
                kubeconfig=cluster.kubeconfig_path,
                prefect_api_url=prefect.api_url,
                data_dir=work_dir / "agent",
                poll_seconds=0.2,
            )
            loop = asyncio.new_event_loop()
            stop = asyncio.Event()
            agent_thread = threading.Thread(
                target=loop.run_until_complete,
                args=(Agent(agent_settings).run(stop),),
                name="styrmin-agent",
                daemon=True,
            )
            agent_thread.start()
            stack.callback(agent_thread.join, 60)
            stack.callback(loop.call_soon_threadsafe, stop.set)
            client = styrmin.Client(url=url, token="")
            client.login("admin", password)
            stack.callback(client.close)
            kube = KubeClient(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="styrmin-tests")
            stack.callback(kube.close)
            yield cls(client, kube, cluster, url, prefect.url)

    # --- what an operator does ------------------------------------------------------------------

    def push_driver(self, folder: Path | str, *, version: str | None = None) -> styrmin.Driver:
        """Push a driver folder (or .tar.gz); pushing the same content again is accepted.

        With ``version``, a copy of the folder is pushed as that driver version: one folder gives the
        two versions an upgrade test needs.
        """
        if version is None:
            return self.client.drivers.push(folder).driver
        with tempfile.TemporaryDirectory(prefix="styrmin-driver-") as scratch:
            copy = Path(scratch) / "driver"
            shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            spec_file = copy / SPEC_FILE_NAME
            spec = yaml.safe_load(spec_file.read_text())
            spec["metadata"]["version"] = version
            spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
            return self.client.drivers.push(copy).driver

    def create(
        self,
        name: str,
        *,
        driver: str,
        driver_version: str,
        app_version: str | None = None,
        namespace: str | None = None,
        configuration: dict[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> styrmin.Task:
        """Create a deployment and return its create task once it has ended (succeeded or failed)."""
        change = self.client.deployments.create(
            name,
            namespace=namespace or name,
            driver=driver,
            driver_version=driver_version,
            app_version=app_version,
            configuration=configuration,
        )
        return self.wait(change, timeout)

    def upgrade(
        self,
        name: str,
        *,
        app_version: str | None = None,
        driver_version: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> styrmin.Task:
        """Upgrade a deployment and return the upgrade task once it has ended."""
        change = self.client.deployments.upgrade(name, app_version=app_version, driver_version=driver_version)
        return self.wait(change, timeout)

    def configure(
        self, name: str, configuration: dict[str, Any], timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> styrmin.Task:
        """Replace a deployment's configuration and return the task once it has ended."""
        return self.wait(self.client.deployments.configure(name, configuration), timeout)

    def wait(self, change: styrmin.Change | int, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> styrmin.Task:
        """The task of ``change`` (or the task with that id) once it has ended."""
        if isinstance(change, int):
            task_id = change
        else:
            if change.task is None:
                raise AssertionError(f"The change of deployment {change.deployment.name} started no task.")
            task_id = change.task.id
        return self.client.tasks.wait(task_id, interval=0.2, timeout=timeout)

    def set_actions_user(self, *, active: bool | None = None, role: str | None = None) -> None:
        """Deactivate, activate or change the role of styrmin-actions, as an administrator would."""
        if active is True:
            self.client.users.activate("styrmin-actions")
        elif active is False:
            self.client.users.deactivate("styrmin-actions")
        if role is not None:
            self.client.users.set_role("styrmin-actions", role)


def hook_step(task: styrmin.Task, hook: Hook | str, mode: Mode | str) -> styrmin.Step:
    """The step of ``task`` that ran ``hook`` in ``mode`` ("Run the upgrade hook", ...).

    Raises:
        AssertionError: listing the task's steps, when it has no such step.
    """
    name = hook_step_name(Hook(hook), Mode(mode))
    for step in task.steps:
        if step.name == name:
            return step
    raise AssertionError(f'Task {task.id} has no step "{name}"; its steps: {[s.name for s in task.steps]}.')


def describe(task: styrmin.Task) -> str:
    """A task with its steps, errors, notes and output, to print when an assertion fails."""
    lines = [f"task {task.id} {task.type.value} {task.status.value}: {task.error or ''}"]
    for step in task.steps:
        lines.append(f"  step {step.name!r} {step.status.value}: {step.error or ''}")
        lines.extend(f"    note: {note}" for note in step.notes)
        lines.extend(
            f"    started task {t.id} {t.type.value} {t.status.value} {t.error or ''}"
            for t in step.started_tasks
        )
        if step.output_tail:
            lines.append(
                f"    output ({'cut' if step.output_truncated else 'whole'}): ...{step.output_tail[-300:]}"
            )
    return "\n".join(lines)
