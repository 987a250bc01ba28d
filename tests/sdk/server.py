"""A real Styrmin server on a loopback port (uvicorn in a thread), and helpers to drive its tasks.

There is no agent yet, so tests record a task's progress the way the agent will: with the workflow
service functions, on the server's own database.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy import Engine

from styrmin_backend.domain.roles import Role
from styrmin_backend.services import users, workflow
from styrmin_backend.store.db import make_engine
from tests.api.conftest import ADMIN_PASSWORD, Stack, make_stack

USER_PASSWORD = "a-long-password-for-sdk-tests"


@dataclass
class LiveServer:
    """A Styrmin server answering on ``url``, its database, and helpers acting on it directly."""

    url: str
    stack: Stack
    kind: str

    @property
    def engine(self) -> Engine:
        return self.stack.engine

    def session(self) -> Any:
        return self.stack.session()

    def token_for(self, username: str) -> str:
        return self.stack.token_for(username)

    def admin_token(self) -> str:
        return self.stack.token_for("admin")

    def actions_token(self, task_id: int | None = None) -> str:
        """A styrmin-actions token of the reconciliation of ``task_id``."""
        return self.stack.actions_token(task_id=task_id)[1]

    def make_user(self, role: Role, username: str | None = None) -> str:
        """A new user with ``role`` (and USER_PASSWORD); returns its name."""
        username = username or unique("user")
        with self.session() as session:
            users.create_user(session, username, role, USER_PASSWORD)
        return username


def unique(prefix: str) -> str:
    """A fresh name that fits deployment and user names (the server is shared by a session)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextmanager
def serve(database_url: str, data_dir: Path, kind: str) -> Iterator[LiveServer]:
    """Run the app on a free loopback port until the block ends."""
    engine = make_engine(database_url)
    stack = make_stack(engine, data_dir)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(stack.client.app, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("The test server did not start.")
        time.sleep(0.02)
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}", stack=stack, kind=kind)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        listener.close()
        stack.client.app.state.claim_wakeups.close()  # what the lifespan (off here) ends with
        engine.dispose()


# --- a small valid driver ----------------------------------------------------------------------

_CHART = """\
apiVersion: v2
name: {name}
version: 0.1.0
appVersion: "{app}"
"""

_TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{{{ .Release.Name }}}}-server
spec:
  template:
    spec:
      containers:
        - name: server
          image: "example.com/{name}/server:{{{{ .Chart.AppVersion }}}}"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{{{ .Release.Name }}}}-worker
spec:
  template:
    spec:
      containers:
        - name: worker
          image: "example.com/{name}/worker:{{{{ .Chart.AppVersion }}}}"
"""

_SPEC = """\
apiVersion: styrmin.io/v1
kind: Driver
metadata:
  name: {name}
  version: {version}
  description: A driver for the SDK and CLI tests.
spec:
  application:
    name: Demo
    defaultVersion: "{app}"
  components:
    - name: server
      workload:
        kind: Deployment
        name: "{{{{ .Release.Name }}}}-server"
      container: server
    - name: worker
      workload:
        kind: Deployment
        name: "{{{{ .Release.Name }}}}-worker"
  actions: []
"""


def write_driver(root: Path, name: str = "demo", version: str = "1.0.0", app: str = "1.0.0") -> Path:
    """Write a valid driver (two components, no actions) into ``root``."""
    (root / "chart" / "templates").mkdir(parents=True)
    (root / "driver.styrmin.yml").write_text(_SPEC.format(name=name, version=version, app=app))
    (root / "chart" / "Chart.yaml").write_text(_CHART.format(name=name, app=app))
    (root / "chart" / "templates" / "workloads.yaml").write_text(_TEMPLATE.format(name=name))
    return root


def write_invalid_driver(root: Path) -> Path:
    """A driver with two problems: an action with an unknown hook and an unknown mode."""
    write_driver(root, name="broken")
    spec = (root / "driver.styrmin.yml").read_text().replace("  actions: []\n", "")
    spec += (
        "  actions:\n"
        "    - name: later\n"
        "      hook: sometime\n"
        "      mode: later\n"
        '      location: "actions.py::later"\n'
    )
    (root / "driver.styrmin.yml").write_text(spec)
    return root


# --- recording a task's progress as the agent will ---------------------------------------------


def run_task(
    server: LiveServer,
    task_id: int,
    *,
    fail: bool = False,
    pause: float = 0.0,
    output: str | None = None,
    truncated: bool = False,
    note: str | None = None,
) -> dict[str, int]:
    """Carry a pending task to its end in two steps; the second fails when ``fail``. Returns step ids."""
    ids: dict[str, int] = {}
    with server.session() as session:
        workflow.start_task(session, task_id)
        ids["render"] = workflow.add_step(session, task_id, "Render the chart").id
    time.sleep(pause)
    with server.session() as session:
        workflow.end_step(session, ids["render"])
        ids["apply"] = workflow.add_step(session, task_id, "Apply the workloads").id
        if note:
            workflow.add_step_note(session, ids["apply"], note)
    time.sleep(pause)
    with server.session() as session:
        if output is not None:
            workflow.set_step_output(session, ids["apply"], output, output_truncated=truncated)
        workflow.end_step(
            session, ids["apply"], error="Job demo-apply failed with exit code 3." if fail else None
        )
        workflow.end_task(
            session,
            task_id,
            error="Applying the workloads failed." if fail else None,
            result=None if fail else {"rolled_out": ["server", "worker"]},
        )
    return ids


def in_background(target: Any, *args: Any, **kwargs: Any) -> threading.Thread:
    """Run ``target`` in a thread after a short delay (so that a wait starts before the task moves)."""

    def delayed() -> None:
        time.sleep(0.3)
        target(*args, **kwargs)

    thread = threading.Thread(target=delayed, daemon=True)
    thread.start()
    return thread


__all__ = ["ADMIN_PASSWORD", "LiveServer", "serve", "unique", "write_driver"]
