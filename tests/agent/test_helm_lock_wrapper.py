"""The agent's Helm wrapper and its cancel from Prefect, on in-memory fakes of the server and Helm (fast).

The same rules run against the real server in tests/api/test_helm_lock_and_cancel.py and on the whole
stack in test_concurrent_changes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from styrmin_backend.agent import helm_lock
from styrmin_backend.agent.helm_lock import LockedHelmReleases
from styrmin_backend.agent.prefect import ActionOutcome
from styrmin_backend.agent.prefect_cancel import CancelFromPrefect
from styrmin_backend.protocol import ClaimedHelmLock, HelmLockAnswer


class FakeLockServerInMemory:
    """The server's Helm lock routes, in memory: one holder per release."""

    def __init__(self) -> None:
        self.holders: dict[str, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.cancelled: list[tuple[int, str]] = []

    async def acquire_helm_lock(
        self, task_id: int, namespace: str, release: str, lease_seconds: int
    ) -> HelmLockAnswer:
        self.calls.append(("acquire", task_id))
        holder = self.holders.setdefault(f"{namespace}/{release}", task_id)
        return HelmLockAnswer(acquired=holder == task_id, holder_task_id=holder)

    async def renew_helm_lock(self, task_id: int, namespace: str, release: str, lease_seconds: int) -> None:
        self.calls.append(("renew", task_id))

    async def release_helm_lock(self, task_id: int, namespace: str, release: str) -> None:
        self.calls.append(("release", task_id))
        if self.holders.get(f"{namespace}/{release}") == task_id:
            del self.holders[f"{namespace}/{release}"]

    async def cancelled_in_prefect(self, task_id: int, flow_run_id: str) -> None:
        self.cancelled.append((task_id, flow_run_id))


class FakeHelmInMemory:
    """Helm that refuses an operation while another runs on the release, as the real one does."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.running: set[str] = set()
        self.order: list[str] = []
        self.seconds = seconds

    async def prepare(self, request: Any) -> Any:
        return request

    async def apply(
        self, chart: Any, release: str, namespace: str, timeout: int, *, replicas_only: bool = False
    ) -> None:
        """``chart`` here is the number of the task applying it."""
        if release in self.running:
            raise RuntimeError("another operation (install/upgrade/rollback) is in progress")
        self.running.add(release)
        self.order.append(f"start {chart}")
        await asyncio.sleep(self.seconds)
        self.order.append(f"end {chart}")
        self.running.discard(release)

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        return True


def test_two_tasks_helm_operations_on_one_release_take_turns_and_never_overlap(monkeypatch: Any) -> None:
    monkeypatch.setattr(helm_lock, "HELM_LOCK_POLL_SECONDS", 0.01)
    server, helm = FakeLockServerInMemory(), FakeHelmInMemory()

    async def both() -> None:
        first = LockedHelmReleases(helm, server, 1, lease_seconds=30)
        second = LockedHelmReleases(helm, server, 2, lease_seconds=30)
        await asyncio.gather(
            first.apply(1, "shop", "shop", 60),
            second.apply(2, "shop", "shop", 60),
        )

    asyncio.run(both())
    assert helm.order == ["start 1", "end 1", "start 2", "end 2"]
    assert ("release", 1) in server.calls and server.holders == {}


def test_a_task_cancelled_during_its_helm_operation_holds_the_lock_until_helm_returns() -> None:
    server, helm = FakeLockServerInMemory(), FakeHelmInMemory(seconds=0.3)

    async def cancel_midway() -> list[tuple[str, int]]:
        locked = LockedHelmReleases(helm, server, 1, lease_seconds=30)
        running = asyncio.ensure_future(locked.apply(1, "shop", "shop", 60))
        await asyncio.sleep(0.05)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        return list(server.calls)

    calls = asyncio.run(cancel_midway())
    # Helm's operation ended before the lock was let go of: no other task could meet it.
    assert helm.order == ["start 1", "end 1"]
    assert calls[-1] == ("release", 1)


class FakeRunnerInMemory:
    def __init__(self, outcome: ActionOutcome) -> None:
        self.outcome = outcome

    async def run_action(self, *args: Any, **kwargs: Any) -> ActionOutcome:
        return self.outcome


def test_a_flow_run_cancelled_in_prefect_cancels_the_task_and_stops_its_reconciliation() -> None:
    server, stopped = FakeLockServerInMemory(), []
    cancelled = ActionOutcome(False, "Cancelled in Prefect", "run-1", 1.0, cancelled=True)
    runner = CancelFromPrefect(FakeRunnerInMemory(cancelled), server, 7, lambda: stopped.append(7))
    assert asyncio.run(runner.run_action(Path("d"), "actions.py::x", {}, {}, 60)) is cancelled
    assert server.cancelled == [(7, "run-1")] and stopped == [7]

    failed = ActionOutcome(False, "boom", "run-2", 1.0)
    runner = CancelFromPrefect(FakeRunnerInMemory(failed), server, 8, lambda: stopped.append(8))
    asyncio.run(runner.run_action(Path("d"), "actions.py::x", {}, {}, 60))
    assert server.cancelled == [(7, "run-1")] and stopped == [7]  # a failure is not a cancel


class RenderedInMemory:
    """A chart the in-memory Helm 'rendered': the task's number, and whether it was discarded."""

    def __init__(self, task: int) -> None:
        self.task = task
        self.discarded = False

    async def discard(self) -> None:
        self.discarded = True


class RenderingHelmInMemory(FakeHelmInMemory):
    """Rendering takes ``render_seconds`` (or fails); ``apply`` is given what ``prepare`` returned."""

    def __init__(self, render_seconds: float = 0.05, fails: bool = False) -> None:
        super().__init__()
        self.render_seconds = render_seconds
        self.fails = fails

    async def prepare(self, request: Any) -> Any:
        await asyncio.sleep(self.render_seconds)
        if self.fails:
            raise RuntimeError("the chart does not render")
        return RenderedInMemory(request.task)

    async def apply(
        self, chart: Any, release: str, namespace: str, timeout: int, *, replicas_only: bool = False
    ) -> None:
        await super().apply(chart.task, release, namespace, timeout)


class Request:
    def __init__(self, task: int) -> None:
        self.task, self.release, self.namespace = task, "shop", "shop"


def test_the_lock_is_taken_while_the_chart_renders_and_let_go_of_before_the_task_ends() -> None:
    server, helm = FakeLockServerInMemory(), RenderingHelmInMemory()

    async def one_task() -> tuple[list[tuple[str, int]], dict[str, int]]:
        locked = LockedHelmReleases(helm, server, 1, lease_seconds=30)
        rendering = asyncio.ensure_future(locked.prepare(Request(1)))
        await asyncio.sleep(0.01)
        during_rendering = list(server.calls)
        chart = await rendering
        await locked.apply(chart, "shop", "shop", 60)
        held_after_apply = dict(server.holders)  # let go of in the background: maybe still held
        await locked.settled()
        await chart.discard()
        return during_rendering, held_after_apply

    during_rendering, _ = asyncio.run(one_task())
    assert during_rendering == [("acquire", 1)]  # asked for before the chart was rendered
    assert helm.order == ["start 1", "end 1"]
    assert server.holders == {} and server.calls.count(("release", 1)) == 1


def test_two_tasks_rendering_at_once_still_take_turns_at_helm(monkeypatch: Any) -> None:
    monkeypatch.setattr(helm_lock, "HELM_LOCK_POLL_SECONDS", 0.01)
    server, helm = FakeLockServerInMemory(), RenderingHelmInMemory()

    async def task(number: int) -> None:
        locked = LockedHelmReleases(helm, server, number, lease_seconds=30)
        chart = await locked.prepare(Request(number))
        try:
            await locked.apply(chart, "shop", "shop", 60)
        finally:
            await chart.discard()
        await locked.settled()

    async def both() -> None:
        await asyncio.gather(task(1), task(2))

    asyncio.run(both())
    assert helm.order == ["start 1", "end 1", "start 2", "end 2"]
    assert server.holders == {}


def test_a_chart_left_unused_or_that_does_not_render_lets_go_of_the_lock() -> None:
    server = FakeLockServerInMemory()

    async def unused() -> None:
        locked = LockedHelmReleases(RenderingHelmInMemory(), server, 1, lease_seconds=30)
        chart = await locked.prepare(Request(1))
        assert server.holders == {"shop/shop": 1}
        await chart.discard()  # a later revision was in the cluster: not applied

    asyncio.run(unused())
    assert server.holders == {} and server.calls[-1] == ("release", 1)

    async def broken() -> None:
        locked = LockedHelmReleases(RenderingHelmInMemory(render_seconds=0, fails=True), server, 2, 30)
        with contextlib.suppress(RuntimeError):
            await locked.prepare(Request(2))

    asyncio.run(broken())
    # The request in flight was answered before the render failed: the lock it got is let go of.
    assert server.holders == {} and ("acquire", 2) in server.calls and server.calls[-1] == ("release", 2)


async def _applied(server: FakeLockServerInMemory, times: int = 1) -> LockedHelmReleases:
    """Task 1's wrapper, after ``times`` charts rendered, applied and discarded as a reconciliation does."""
    locked = LockedHelmReleases(RenderingHelmInMemory(render_seconds=0), server, 1, lease_seconds=30)
    for _ in range(times):
        chart = await locked.prepare(Request(1))
        await locked.apply(chart, "shop", "shop", 60)
        await chart.discard()
    return locked


def test_a_task_that_ends_right_after_its_helm_operation_leaves_the_lock_to_its_end() -> None:
    server = FakeLockServerInMemory()

    async def one_task() -> bool:
        return await (await _applied(server)).settled(with_end=True)

    assert asyncio.run(one_task()) is True
    # No call of its own: the task's end lets go of it (release_helm_locks).
    assert ("release", 1) not in server.calls and server.holders == {"shop/shop": 1}


def test_locks_left_to_an_end_that_could_not_let_go_of_them_are_let_go_of_by_calls() -> None:
    server = FakeLockServerInMemory()

    async def one_task() -> tuple[bool, bool]:
        locked = await _applied(server)
        left = await locked.settled(with_end=True)
        return left, await locked.settled()  # a server older than release_helm_locks refused the end

    assert asyncio.run(one_task()) == (True, False)
    assert server.calls.count(("release", 1)) == 1 and server.holders == {}


def test_a_task_still_working_after_its_helm_operation_lets_go_of_the_lock_by_itself() -> None:
    server = FakeLockServerInMemory()

    async def one_task() -> bool:
        locked = await _applied(server)
        for _ in range(3000):  # the task waits for its replicas: the lock goes without waiting for it
            if ("release", 1) in server.calls:
                break
            await asyncio.sleep(0.01)
        return await locked.settled(with_end=True)

    assert asyncio.run(one_task()) is False  # nothing left for the end
    assert server.calls.count(("release", 1)) == 1 and server.holders == {}


def test_a_second_helm_operation_of_a_task_lets_go_of_the_first_lock_at_once() -> None:
    server = FakeLockServerInMemory()

    async def one_task() -> list[tuple[str, int]]:
        await (await _applied(server, times=2)).settled()
        return server.calls

    calls = asyncio.run(one_task())
    assert calls == [("acquire", 1), ("release", 1), ("acquire", 1), ("release", 1)]


CLAIMED = ClaimedHelmLock(namespace="shop", release="shop")


def test_a_lock_taken_with_the_claim_serves_the_first_operation_without_asking_again() -> None:
    server = FakeLockServerInMemory()
    server.holders["shop/shop"] = 1  # the server took it for task 1 with the claim

    async def one_task() -> bool:
        locked = LockedHelmReleases(RenderingHelmInMemory(render_seconds=0), server, 1, 30, CLAIMED)
        chart = await locked.prepare(Request(1))
        await locked.apply(chart, "shop", "shop", 60)
        await chart.discard()
        # A second operation asks for it as usual, once the first let go of it.
        chart = await locked.prepare(Request(1))
        await locked.apply(chart, "shop", "shop", 60)
        await chart.discard()
        return await locked.settled(with_end=True)

    assert asyncio.run(one_task()) is True
    assert server.calls == [("release", 1), ("acquire", 1)]


def test_a_lock_taken_with_the_claim_and_never_used_is_let_go_of_with_the_end_or_by_a_call() -> None:
    server = FakeLockServerInMemory()
    server.holders["shop/shop"] = 1

    async def ended_before_any_operation() -> tuple[bool, bool]:
        locked = LockedHelmReleases(FakeHelmInMemory(), server, 1, 30, CLAIMED)
        left = await locked.settled(with_end=True)  # the end lets go of it (release_helm_locks)
        return left, await locked.settled()  # a server older than that refused the end: a call

    assert asyncio.run(ended_before_any_operation()) == (True, False)
    assert server.calls == [("release", 1)] and server.holders == {}


def test_a_lock_taken_with_the_claim_is_let_go_of_when_the_chart_does_not_render() -> None:
    server = FakeLockServerInMemory()
    server.holders["shop/shop"] = 1

    async def broken() -> None:
        locked = LockedHelmReleases(
            RenderingHelmInMemory(render_seconds=0, fails=True), server, 1, 30, CLAIMED
        )
        with contextlib.suppress(RuntimeError):
            await locked.prepare(Request(1))
        assert await locked.settled(with_end=True) is False  # nothing left for the end

    asyncio.run(broken())
    assert server.calls == [("release", 1)] and server.holders == {}


def test_a_lock_taken_with_the_claim_is_let_go_of_when_the_task_stops_before_using_it() -> None:
    """A task cancelled right after its claim never reaches its Helm operation nor its end: the
    lock its claim took is let go of as its reconciliation stops, not renewed for good."""
    server = FakeLockServerInMemory()
    server.holders["shop/shop"] = 1

    async def stopped_before_any_operation() -> None:
        locked = LockedHelmReleases(FakeHelmInMemory(), server, 1, 30, CLAIMED)
        await locked.let_go_of_an_unused_claim_lock()
        await locked.let_go_of_an_unused_claim_lock()  # once only

    asyncio.run(stopped_before_any_operation())
    assert server.calls == [("release", 1)] and server.holders == {}


def test_a_used_or_ended_claim_lock_is_not_let_go_of_again_when_the_task_stops() -> None:
    server = FakeLockServerInMemory()
    server.holders["shop/shop"] = 1

    async def one_task() -> None:
        locked = LockedHelmReleases(RenderingHelmInMemory(render_seconds=0), server, 1, 30, CLAIMED)
        chart = await locked.prepare(Request(1))
        await locked.apply(chart, "shop", "shop", 60)
        await chart.discard()
        assert await locked.settled(with_end=True) is True  # the end lets go of it
        await locked.let_go_of_an_unused_claim_lock()

    asyncio.run(one_task())
    assert server.calls == []
