"""The whole of Styrmin in one test process: server on loopback, local cluster, Prefect server, agent.

The stack is the one ``styrmin up`` runs (``styrmin_backend.local``), on a free port with a random
admin password, driven through the Python SDK.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client as KubeClient
from lightkube import KubeConfig
from pydantic import SecretStr

import styrmin
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.drivers import SPEC_FILE_NAME
from styrmin_backend.local import LocalStyrmin, run_locally
from styrmin_backend.settings import Settings

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
    server's, ``prefect_ui_url`` and ``prefect_api_url`` the Prefect server's addresses, and
    ``admin_password`` the admin's (random) password.
    Start it with :meth:`start` (a context manager) or the ``styrmin_stack`` pytest fixture.
    """

    def __init__(
        self, client: styrmin.Client, kube: KubeClient, local: LocalStyrmin, admin_password: str
    ) -> None:
        self.client = client
        self.kube = kube
        self.cluster = local.cluster  # its kubeconfig_path and data_dir; started by styrmin_backend.local
        self.url = local.url
        self.prefect_ui_url = local.prefect.url
        self.prefect_api_url = local.prefect.api_url
        self.admin_password = admin_password

    @classmethod
    @contextmanager
    def start(
        cls,
        work_dir: Path,
        catalogs: Sequence[Path] = (),
        *,
        agent_options: Mapping[str, Any] | None = None,
    ) -> Iterator[StyrminStack]:
        """Start everything under ``work_dir``; image catalogs ``catalogs`` say how pods run locally.

        ``agent_options`` sets agent settings (``lease_seconds``, ``status_seconds``, ...). Stops it
        all on exit. Takes a few seconds: share one per test session.
        """
        work_dir = Path(work_dir)
        password = secrets.token_urlsafe(16)
        port = _free_port()
        settings = Settings(
            data_dir=work_dir,
            port=port,
            admin_password=SecretStr(password),
            log_level="WARNING",
        )
        options = {"poll_seconds": 0.2, **(agent_options or {})}
        with ExitStack() as stack:
            local = stack.enter_context(run_locally(settings, catalogs=catalogs, agent_options=options))
            # Tests start on a warm stack: no action process is still starting while they push and run.
            local.wait_until_warm(120)
            # Pushing validates the driver by importing its actions: allow for a loaded machine.
            client = styrmin.Client(url=local.url, token="", timeout=120)
            client.login("admin", password)
            stack.callback(client.close)
            kube = KubeClient(
                KubeConfig.from_file(local.cluster.kubeconfig_path), field_manager="styrmin-tests"
            )
            stack.callback(kube.close)
            yield cls(client, kube, local, password)

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
