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
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from styrmin_backend.agent.ports import ChartRequest, Helm, PreparedChart
from styrmin_backend.agent.server_api import ServerApi, ServerError
from styrmin_backend.protocol import ClaimedHelmLock

log = logging.getLogger("styrmin.agent")

HELM_LOCK_POLL_SECONDS = 0.5
"""How often a task waiting for another task's Helm operation asks for the lock again."""

LET_GO_AFTER_SECONDS = 0.1
"""How long a lock stays held after a Helm operation succeeded before a call of its own lets go of it:
a task that ends sooner lets go of it with its end instead (one call fewer). Short beside how often
a waiting task asks again (``HELM_LOCK_POLL_SECONDS``)."""

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


class _HeldLock:
    """The Helm lock of one release for one task: taken, renewed while held, let go of once."""

    def __init__(self, api: HelmLockApi | ServerApi, task_id: int, namespace: str, release: str, lease: int):
        self._api = api
        self._task_id = task_id
        self.namespace = namespace
        self.release = release
        self._lease_seconds = lease
        self.held = False
        self.wanted = True
        """False: stop asking once the request in flight is answered (the chart is not applied)."""
        self._renewing: asyncio.Task[None] | None = None
        self.left_to_end = False
        """True: the task's end lets go of the lock (``release_helm_locks``), not a call of its own."""

    async def take(self) -> None:
        """Ask until the lock is held, or until it is no longer wanted."""
        waited_for: int | None = None
        while self.wanted:
            answer = await self._api.acquire_helm_lock(
                self._task_id, self.namespace, self.release, self._lease_seconds
            )
            if answer.acquired:
                self.hold()
                return
            if answer.holder_task_id != waited_for:
                waited_for = answer.holder_task_id
                log.info(
                    "Task %s waits for the Helm operation of task %s on release %s",
                    self._task_id,
                    waited_for,
                    self.release,
                )
            await asyncio.sleep(HELM_LOCK_POLL_SECONDS)

    def hold(self) -> None:
        """The server gave the task the lock (an answer, or the claim): hold it, renewing its lease."""
        self.held = True
        self._renewing = asyncio.create_task(self._renew())

    async def let_go(self) -> None:
        """Stop renewing and let go of the lock, if held (once)."""
        if self.held:
            await self._stop_holding()
            await self.send_release()

    async def leave_to_end(self) -> None:
        """Stop renewing, if held: the task's end lets go of the lock."""
        if self.held:
            self.left_to_end = True
            await self._stop_holding()

    async def _stop_holding(self) -> None:
        self.held = False
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing

    async def send_release(self) -> None:
        """Ask the server to let go of the lock (nothing happens when the task holds it no longer)."""
        try:
            await self._api.release_helm_lock(self._task_id, self.namespace, self.release)
        except ServerError as error:  # its lease runs out instead, and the next task takes it then
            log.warning("Could not let go of the Helm lock of %s: %s", self.release, error)

    async def _renew(self) -> None:
        delay = self._lease_seconds / 3
        while True:
            await asyncio.sleep(delay)
            try:
                await self._api.renew_helm_lock(
                    self._task_id, self.namespace, self.release, self._lease_seconds
                )
                delay = self._lease_seconds / 3
            except ServerError as error:
                if error.status_code == 409:
                    log.error("Task %s lost the Helm lock of %s: %s", self._task_id, self.release, error)
                    return
                log.warning("Could not renew the Helm lock of %s (trying again): %s", self.release, error)
                delay = min(2.0, self._lease_seconds / 6)


async def _give_up(taking: asyncio.Future[None], lock: _HeldLock) -> None:
    """Stop taking a lock that will not be used: the request in flight is answered first (a lock
    granted then would otherwise stay held until its lease ran out), and a held lock is let go of."""
    lock.wanted = False
    with contextlib.suppress(Exception):
        await asyncio.shield(taking)
    await lock.let_go()


@dataclass
class LockedChart:
    """A chart rendered while its release's Helm lock was taken: applied under it, or let go of."""

    chart: PreparedChart
    lock: _HeldLock
    applied: bool = False
    """Once applied, the lock is let go of as ``LockedHelmReleases.apply`` decided."""

    def configured_replicas(self) -> dict[tuple[str, str], int]:
        return self.chart.configured_replicas()

    async def discard(self) -> None:
        if not self.applied:
            await self.lock.let_go()  # unused: nothing to wait for
        await self.chart.discard()


class LockedHelmReleases:
    """The Helm port of task ``task_id``: each write to the release under the deployment's Helm lock.

    The lock is taken while the chart renders (rendering needs none, but the lock is needed next),
    and let go of in the background after a successful apply, ``LET_GO_AFTER_SECONDS`` later, while the
    task reads its components; ``settled`` lets go at once, before the lock is taken again, or leaves
    the locks to the task's end, which usually follows within that time.

    A lock the server took with the claim (``held``, for a task whose first step is a Helm operation)
    is held from the start and serves the first operation on its release; unused, the task's end
    lets go of it.
    """

    def __init__(
        self,
        helm: Helm,
        api: HelmLockApi | ServerApi,
        task_id: int,
        lease_seconds: int,
        held: ClaimedHelmLock | None = None,
    ) -> None:
        self._helm = helm
        self._api = api
        self._task_id = task_id
        self._lease_seconds = lease_seconds
        self._from_claim: _HeldLock | None = None
        """The lock taken with the claim, until an operation uses it or the task ends."""
        if held is not None:
            self._from_claim = self._lock(held.namespace, held.release)
            self._from_claim.hold()
        self._letting_go: list[tuple[_HeldLock, asyncio.Task[None]]] = []
        self._now = asyncio.Event()
        """Set: the locks waiting in ``_let_go_soon`` are let go of (or left to the end) at once."""
        self._left: list[_HeldLock] = []
        """Locks left to the task's end (``settled(with_end=True)``), until it has let go of them."""

    def _lock(self, namespace: str, release: str) -> _HeldLock:
        return _HeldLock(self._api, self._task_id, namespace, release, self._lease_seconds)

    def _taken_with_claim(self, namespace: str, release: str) -> _HeldLock | None:
        """The lock of ``release`` the claim took, for the first operation on it (once)."""
        lock = self._from_claim
        if lock is None or (lock.namespace, lock.release) != (namespace, release):
            return None
        self._from_claim = None
        return lock

    async def prepare(self, request: ChartRequest) -> PreparedChart:
        """Render the chart, as the wrapped port does, while the release's lock is taken."""
        held = self._taken_with_claim(request.namespace, request.release)
        await self.settled()  # a lock let go of in the background is let go of before it is taken again
        if held is not None:
            try:
                return LockedChart(await self._helm.prepare(request), held)
            except BaseException:
                await held.let_go()
                raise
        lock = self._lock(request.namespace, request.release)
        taking = asyncio.ensure_future(lock.take())
        try:
            chart = await self._helm.prepare(request)
        except BaseException:
            await _give_up(taking, lock)
            raise
        try:
            await asyncio.shield(taking)
        except BaseException:
            await _give_up(taking, lock)
            await chart.discard()
            raise
        return LockedChart(chart, lock)

    async def apply(
        self, chart: PreparedChart, release: str, namespace: str, timeout: int, *, replicas_only: bool = False
    ) -> str | None:
        """Install or upgrade (or scale in place) once no other task runs a Helm operation on the release."""
        if not isinstance(chart, LockedChart):  # rendered elsewhere: the lock is taken now
            async with self._held(namespace, release):
                return await _to_the_end(
                    self._helm.apply(chart, release, namespace, timeout, replicas_only=replicas_only)
                )
        lock = chart.lock
        assert lock.held and (lock.namespace, lock.release) == (namespace, release), (
            "taken for another release"
        )
        try:
            recovered = await _to_the_end(
                self._helm.apply(chart.chart, release, namespace, timeout, replicas_only=replicas_only)
            )
        except BaseException:
            await lock.let_go()
            raise
        chart.applied = True
        self._letting_go.append((lock, asyncio.create_task(self._let_go_soon(lock, self._now))))
        return recovered

    @staticmethod
    async def _let_go_soon(lock: _HeldLock, now: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LET_GO_AFTER_SECONDS):
                await now.wait()
        await lock.let_go()  # nothing when it was left to the end meanwhile

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        """Uninstall once no other task runs a Helm operation on the release."""
        async with self._held(namespace, release):
            return await _to_the_end(self._helm.uninstall(release, namespace, timeout))

    async def settled(self, *, with_end: bool = False) -> bool:
        """Let go now of the locks still held after their operations, each by a call; with ``with_end``,
        leave those not being let go of yet to the task's end, and answer whether there are any.

        After ``with_end``, a call without it lets go of the locks left by a call each: the end that
        was to let go of them could not (a server older than ``release_helm_locks``).
        """
        letting_go, self._letting_go = self._letting_go, []
        unused, self._from_claim = self._from_claim, None
        if unused is not None:  # taken with the claim, and no operation came: let go of it as well
            if with_end:
                await unused.leave_to_end()
                self._left.append(unused)
            else:
                await unused.let_go()
        if with_end:
            for lock, _ in letting_go:
                await lock.leave_to_end()
        now, self._now = self._now, asyncio.Event()
        now.set()
        await asyncio.gather(*(letting for _, letting in letting_go))
        if with_end:
            self._left.extend(lock for lock, _ in letting_go if lock.left_to_end)
            return bool(self._left)
        left, self._left = self._left, []
        for lock in left:
            await lock.send_release()
        return False

    async def let_go_of_an_unused_claim_lock(self) -> None:
        """Let go of the lock taken with the claim if no operation used it and the task's end did not
        take it along: a reconciliation stopped before its first Helm operation (its task cancelled)
        would otherwise renew it for as long as the agent runs, holding up the deployment's Helm
        operations. Nothing otherwise."""
        unused, self._from_claim = self._from_claim, None
        if unused is not None:
            await unused.let_go()

    @asynccontextmanager
    async def _held(self, namespace: str, release: str) -> AsyncIterator[None]:
        held = self._taken_with_claim(namespace, release)
        await self.settled()
        lock = held or self._lock(namespace, release)
        if held is None:
            await lock.take()
        try:
            yield
        finally:
            await lock.let_go()


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
