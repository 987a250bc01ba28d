"""Helm operations of one task, each holding its deployment's Helm lock for as long as it lasts.

Changes of one deployment run side by side; Helm allows one operation at a time on a release, and
refuses the second ("another operation (install/upgrade/rollback) is in progress"). Around each
install, upgrade or uninstall, this wrapper takes the release's lock on the server (a row with a
lease, shared by every agent and server), renews it while Helm runs, and lets go of it after. While
another task holds it, it asks again every ``HELM_LOCK_POLL_SECONDS``; the server notes on the
waiting step which task it waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

from styrmin_backend.agent.ports import ChartRequest, Helm, PreparedChart
from styrmin_backend.agent.server_api import ServerApi, ServerError

log = logging.getLogger("styrmin.agent")

HELM_LOCK_POLL_SECONDS = 0.5
"""How often a task waiting for another task's Helm operation asks for the lock again."""

_T = TypeVar("_T")


class HelmLockApi(Protocol):
    """The server calls the lock needs (``ServerApi``)."""

    async def acquire_helm_lock(
        self, task_id: int, namespace: str, release: str, lease_seconds: int
    ) -> Any: ...

    async def renew_helm_lock(
        self, task_id: int, namespace: str, release: str, lease_seconds: int
    ) -> None: ...

    async def release_helm_lock(self, task_id: int, namespace: str, release: str) -> None: ...


class LockedHelmReleases:
    """The Helm port of task ``task_id``: each write to the release under the deployment's Helm lock
    (rendering a chart needs none)."""

    def __init__(self, helm: Helm, api: HelmLockApi | ServerApi, task_id: int, lease_seconds: int) -> None:
        self._helm = helm
        self._api = api
        self._task_id = task_id
        self._lease_seconds = lease_seconds

    async def prepare(self, request: ChartRequest) -> PreparedChart:
        """Render the chart, as the wrapped port does."""
        return await self._helm.prepare(request)

    async def apply(self, chart: PreparedChart, release: str, namespace: str, timeout: int) -> str | None:
        """Install or upgrade once no other task runs a Helm operation on the release."""
        async with self._held(namespace, release):
            return await _to_the_end(self._helm.apply(chart, release, namespace, timeout))

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        """Uninstall once no other task runs a Helm operation on the release."""
        async with self._held(namespace, release):
            return await _to_the_end(self._helm.uninstall(release, namespace, timeout))

    @asynccontextmanager
    async def _held(self, namespace: str, release: str) -> AsyncIterator[None]:
        waited_for: int | None = None
        while True:
            answer = await self._api.acquire_helm_lock(self._task_id, namespace, release, self._lease_seconds)
            if answer.acquired:
                break
            if answer.holder_task_id != waited_for:
                waited_for = answer.holder_task_id
                log.info(
                    "Task %s waits for the Helm operation of task %s on release %s",
                    self._task_id,
                    waited_for,
                    release,
                )
            await asyncio.sleep(HELM_LOCK_POLL_SECONDS)
        renewing = asyncio.create_task(self._renew(namespace, release))
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            try:
                await self._api.release_helm_lock(self._task_id, namespace, release)
            except ServerError as error:  # its lease runs out instead, and the next task takes it then
                log.warning("Could not let go of the Helm lock of %s: %s", release, error)

    async def _renew(self, namespace: str, release: str) -> None:
        delay = self._lease_seconds / 3
        while True:
            await asyncio.sleep(delay)
            try:
                await self._api.renew_helm_lock(self._task_id, namespace, release, self._lease_seconds)
                delay = self._lease_seconds / 3
            except ServerError as error:
                if error.status_code == 409:
                    log.error("Task %s lost the Helm lock of %s: %s", self._task_id, release, error)
                    return
                log.warning("Could not renew the Helm lock of %s (trying again): %s", release, error)
                delay = min(2.0, self._lease_seconds / 6)


async def _to_the_end(operation: Awaitable[_T]) -> _T:
    """Await a Helm operation; when cancelled, still wait until it returns before raising.

    Helm runs in a thread that cannot be stopped: the lock is held until it has returned, so that no
    other task's operation meets it ("another operation is in progress").
    """
    running = asyncio.ensure_future(operation)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        while not running.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([running])
        raise
