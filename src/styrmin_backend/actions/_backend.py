"""Every effect a primitive has, behind one typed interface: the Styrmin API and the deployment's cluster.

The primitives (``components.py``, ``images.py``, ``commands.py``) hold the rules of the lifecycle
documentation and reach the outside world only through an :class:`ActionBackend`. In the agent that is
the real one (the Python SDK and lightkube, in ``_api.py`` and ``_kube.py``), which the action
process's entry point wires with :func:`set_default_backend`; a driver author's test swaps in the
in-memory one of ``styrmin_backend.testing`` with :func:`use_backend`, so the same rules run against
both. This port knows no adapter of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import styrmin
from styrmin_backend.actions._tail import OutputTail
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.drivers import DriverSpec


class ApiUnavailable(Exception):
    """The Styrmin API cannot be called at all (no usable URL)."""


class ApiRefused(Exception):
    """The Styrmin API refused the token (401 or 403); the message is the server's."""


class ApiFailed(Exception):
    """A call to the Styrmin API failed for another reason; the message says why."""


ApiError = ApiUnavailable | ApiRefused | ApiFailed
"""What a :class:`StyrminApi` raises; the primitives turn each into an ``ActionError`` naming the call."""


@dataclass(frozen=True)
class ActionJob:
    """A Job that ``execute_commands`` started, as the cluster has it now."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    ended: bool = False
    succeeded: bool = False
    failure_reason: str = ""
    """Kubernetes' reason and message when it failed (``DeadlineExceeded: ...``), else empty."""
    resource_version: str | None = None


@dataclass(frozen=True)
class JobPod:
    """How the pod of an ended Job went: its name, the command's exit code, or why it never ran."""

    name: str | None
    exit_code: int | None
    why_not_run: str | None = None


class StyrminApi(Protocol):
    """The Styrmin API calls of the primitives, made with the reconciliation's token."""

    @property
    def token(self) -> str | None:
        """The token the calls carry (redacted from a command's output); None when there is none."""
        ...

    async def driver_spec(self, driver_name: str, driver_version: str) -> DriverSpec:
        """The spec of a driver version, as the registry stores it."""
        ...

    async def request_components(
        self, deployment: str, components: list[str], *, running: bool, started_by_step: int
    ) -> int | None:
        """Ask to start (or stop) components; the id of the task it created, linked to the step."""
        ...

    async def request_upgrade(
        self, deployment: str, *, app_version: str, driver_version: str, started_by_step: int
    ) -> int | None:
        """Ask for an upgrade linked to the step; the id of its task, None when nothing changes."""
        ...

    async def request_backup(self, deployment: str, *, started_by_step: int) -> int:
        """Ask for a backup linked to the step; the id of its Backup task."""
        ...

    async def configured_env(self, task_id: int, component: str) -> dict[str, str]:
        """The user's env vars of ``component`` in the configuration of task ``task_id``, secret values
        included (the context shows them only as set); only that task's own actions may read them."""
        ...

    async def wait_for_task(self, task_id: int) -> styrmin.Task:
        """The task once it has ended."""
        ...

    async def add_step_note(self, step_id: int, note: str) -> None:
        """Add a line to a step's notes."""
        ...

    async def store_step_output(self, step_id: int, tail: str, truncated: bool) -> None:
        """Store the kept end of a failed command's output on a step."""
        ...


class Cluster(Protocol):
    """The cluster calls of the primitives. Errors other than those returned are ``ActionError``."""

    async def pod_template(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """The pod template of a workload as it is now, as a plain dict; None when there is no workload."""
        ...

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The decoded data of Secret ``name``; None when there is no such Secret."""
        ...

    async def list_action_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[ActionJob]:
        """The Jobs of ``namespace`` with ``labels``."""
        ...

    async def create_job(self, manifest: dict[str, Any]) -> str | None:
        """Create a Job from ``manifest``; its resource version, or None when its name is taken."""
        ...

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a Job and its pods; False when it was already gone."""
        ...

    async def wait_for_job_end(self, namespace: str, name: str, resource_version: str | None) -> ActionJob:
        """The Job once it has ended (the caller bounds the wait)."""
        ...

    async def job_pod(self, namespace: str, job_name: str) -> JobPod:
        """The pod of an ended Job: the command's exit code, or why it did not run."""
        ...

    async def read_job_log(self, namespace: str, pod: str, tail: OutputTail) -> None:
        """Stream the log of the Job's command through ``tail``."""
        ...

    async def mark_job_output_read(self, namespace: str, name: str) -> None:
        """Say on the Job that its action has read its result, so a later action may delete it."""
        ...


class ActionBackend(Protocol):
    """Where the primitives' effects go: the Styrmin API and the deployment's cluster."""

    @property
    def api(self) -> StyrminApi: ...

    @property
    def cluster(self) -> Cluster: ...

    def log(self, message: str) -> None:
        """Say what a primitive did (the flow run's log in the agent)."""
        ...


_current: ContextVar[ActionBackend | None] = ContextVar("styrmin_action_backend", default=None)
_default: Callable[[GlobalContext], ActionBackend] | None = None

NO_BACKEND_ERROR = (
    "The primitives have no backend in this process: Styrmin's action processes wire the real one. "
    "To run an action in a test, use styrmin_backend.testing.Context, or use_backend()."
)


def set_default_backend(make: Callable[[GlobalContext], ActionBackend] | None) -> None:
    """Wire the backend of this process's actions, made from each action's context (None: none)."""
    global _default
    _default = make


def backend_for(context: GlobalContext) -> ActionBackend:
    """The backend of the running action: the one :func:`use_backend` set, else the wired one.

    Raises:
        ActionError: if neither is there.
    """
    chosen = _current.get()
    if chosen is not None:
        return chosen
    if _default is None:
        raise ActionError(NO_BACKEND_ERROR)
    return _default(context)


@contextmanager
def use_backend(backend: ActionBackend) -> Iterator[ActionBackend]:
    """Run the primitives called inside the block (in this task and those it starts) against ``backend``."""
    reset = _current.set(backend)
    try:
        yield backend
    finally:
        _current.reset(reset)
