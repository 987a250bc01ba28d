"""The agent: claims tasks of its cluster and runs each as a reconciliation, renewing its lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
import zlib
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from styrmin_backend.agent.backups import check_location
from styrmin_backend.agent.helm_lock import LockedHelmReleases
from styrmin_backend.agent.ports import Ports, WorkloadKey, WorkloadView
from styrmin_backend.agent.prefect import ActionRunner
from styrmin_backend.agent.prefect.health import PrefectWatch
from styrmin_backend.agent.reconciliation import Reconciliation
from styrmin_backend.agent.server_api import ServerApi, ServerError, describe_error
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.agent.wiring import AgentParts, build_parts, ports_of_task
from styrmin_backend.cluster import ClusterAccess
from styrmin_backend.cluster.connection import ClusterConnection
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.memory import keep_started_objects_out_of_garbage_collections
from styrmin_backend.metrics import AGENT_CLAIM_SECONDS, RUNNER_POOL_SIZE, TASKS_RUNNING
from styrmin_backend.protocol import Claim, ComponentStatus
from styrmin_drivers.spec import Workload

log = logging.getLogger("styrmin.agent")


ORPHANED_RUN_MESSAGE = (
    "The Styrmin agent that ran this action stopped before the action ended, and its processes with it; "
    'the Styrmin task ends failed ("The agent stopped while it ran this task").'
)
PREFECT_OUTAGE_RUN_MESSAGE = (
    "The Prefect server went away while this action ran, so the Styrmin agent stopped it; "
    "its Styrmin task ended failed, naming the Prefect server."
)
INSTANCE_FILE = "agent-instance"
STOPPED_AFTER_GRACE_ERROR = (
    "The agent was asked to stop and this task did not end within its grace period ({grace:g} s); "
    "the work may be half done. Look at the deployment and request the change again."
)


def _new_instance(data_dir: Path) -> tuple[str | None, str]:
    """The tag of the agent that last used ``data_dir`` (None at first), and a new one for this agent."""
    path = data_dir / INSTANCE_FILE
    previous = path.read_text().strip() if path.exists() else None
    instance = f"styrmin-agent:{uuid.uuid4().hex[:12]}"
    path.write_text(instance)
    return previous or None, instance


async def _crash_orphaned_runs(runner: ActionRunner, previous: str) -> None:
    """Mark the flow runs the previous agent on this data dir left unfinished Crashed (best effort)."""
    try:
        crashed = await runner.crash_runs_of(previous, ORPHANED_RUN_MESSAGE)
    except Exception as error:  # the agent serves anyway; the runs stay as they are
        log.warning("Could not mark the flow runs of the previous agent (%s) Crashed: %s", previous, error)
        return
    if crashed:
        log.warning(
            "Marked %d flow run(s) the previous agent left running Crashed: %s", len(crashed), crashed
        )


CANCEL_CHECK_SECONDS = 5.0
"""The longest between two lease renewals of a running task: a cancel stops it this soon at most."""

UNCHANGED_REPORT_ROUNDS = 10
"""Every how many rounds of the periodic report the components that did not change are told again."""
WORKLOAD_KINDS: tuple[str, ...] = get_args(Workload.model_fields["kind"].annotation)
"""The kinds a component's workload may be (Deployment, StatefulSet): what a round of reports lists."""
LOCATION_WAIT_SECONDS = 25.0
"""How long one ask for a backup location to check waits on the server (a long poll): a location
set is checked at once, and an idle agent asks a few times a minute."""
LOCATION_RETRY_SECONDS = 2.0
"""The pause after an ask that failed (the server may be restarting)."""


class Agent:
    """Runs the changes of one cluster; stop it by setting the event given to :meth:`run`.

    It runs up to ``concurrency`` tasks at once. Tasks that the actions of its running tasks start
    (``stop_components``, ``start_components``, ``upgrade_deployment_version``) run beside them, never
    in a slot: their parent holds a slot and waits for them, so they must never wait for one.
    """

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self._running: dict[int, asyncio.Task[None]] = {}
        self._claims: dict[int, Claim] = {}
        self._slot_freed = asyncio.Event()
        self._cancelled: set[int] = set()
        """Tasks the server said were cancelled: their reconciliation was stopped on purpose."""
        self._known: dict[str, Claim] = {}
        """The latest task of each deployment this agent ran, to report its components between tasks."""
        self._reported: dict[str, list[ComponentStatus]] = {}
        """What the periodic report last told the server of each deployment's components."""
        self._said_unlisted = False
        """Whether the log already says that the cluster refused to list the component workloads."""
        self.warm = threading.Event()
        """Set once the agent serves and its action processes are all started (from any thread)."""

    def _slots_taken(self) -> int:
        """Running tasks that hold a slot: all but those that actions started."""
        return sum(1 for claim in self._claims.values() if claim.task.parent_task_id is None)

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run tasks until ``stop`` is set; then let the running ones end."""
        settings = self.settings
        connection = ClusterConnection.find(settings.kubeconfig, settings.service_account_dir)
        log.info("Reaching the cluster through %s", connection.describe())
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        previous, instance = _new_instance(settings.data_dir)
        api = ServerApi(
            settings.server_url,
            settings.key.get_secret_value(),
            retry_seconds=settings.retry_seconds,
            instance=instance,
        )
        cluster = ClusterAccess(connection)
        runner = ActionRunner(
            settings.prefect_api_url,
            pool_size=settings.runner_pool_size,
            owner=instance,
            action_env=connection.action_env(),
        )
        RUNNER_POOL_SIZE.set(settings.runner_pool_size)

        async def after_prefect_outage(away_since: float) -> None:
            await runner.replace_ready_processes()
            crashed = await runner.crash_runs_of(
                instance, PREFECT_OUTAGE_RUN_MESSAGE, created_before=datetime.fromtimestamp(away_since, UTC)
            )
            if crashed:
                log.warning("Marked %d flow run(s) stopped by the Prefect outage Crashed.", len(crashed))

        prefect = PrefectWatch(
            runner.api_url,
            check_seconds=settings.prefect_check_seconds,
            outage_seconds=settings.prefect_outage_seconds,
            on_back=after_prefect_outage,
        )
        parts = build_parts(
            api,
            cluster,
            connection,
            runner,
            prefect,
            settings.data_dir,
            settings.backup_dir,
            settings.helm_max_history,
        )
        # Open for as long as this process runs its tasks: closed at its end, or by its crash.
        present = asyncio.create_task(api.stay_present(), name="presence")
        try:
            await cluster.ensure_crd()
            await runner.start()
            if previous:
                await _crash_orphaned_runs(runner, previous)
            log.info("Agent serving; Prefect at %s", runner.api_url)
            warming = asyncio.create_task(self._warm_up(runner))
            reporting = asyncio.create_task(self._report_periodically(parts, stop))
            checking = asyncio.create_task(self._check_backup_locations(parts, stop))
            watching = asyncio.create_task(prefect.watch(stop, busy=lambda: bool(self._running)))
            while not stop.is_set():
                await self._claim_and_start(parts, stop)
            if self._running:
                await self._end_running_tasks(api)
            await reporting
            await checking
            await watching
            warming.cancel()
        finally:
            present.cancel()
            await asyncio.gather(present, return_exceptions=True)
            await runner.close()
            await prefect.close()
            await cluster.close()
            await api.close()

    async def _end_running_tasks(self, api: ServerApi) -> None:
        """After a stop: let running tasks end within the grace period, then end the rest failed."""
        grace = self.settings.stop_grace_seconds
        running = dict(self._running)
        log.info("Stopping: %d task(s) running get up to %g s to end", len(running), grace)
        _done, late = await asyncio.wait(running.values(), timeout=grace or None)
        if not late:
            return
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        for task_id, task in running.items():
            if task not in late:
                continue
            log.warning("Task %s did not end within %g s; it ends failed", task_id, grace)
            try:
                await api.end_task(task_id, STOPPED_AFTER_GRACE_ERROR.format(grace=grace), None)
            except Exception as error:  # its lease runs out instead, with the same outcome
                log.warning("Could not end task %s: %s", task_id, error)

    async def _claim_and_start(self, parts: AgentParts, stop: asyncio.Event) -> None:
        """Claim one task and start it, or wait a little when there is none.

        With every slot taken, or while the Prefect server is away, only a task that an action of a
        running task started is claimed: it runs no action, and its parent waits for it.
        """
        settings = self.settings
        assert parts.prefect is not None
        full = self._slots_taken() >= settings.concurrency
        prefect_down = None if full else await parts.prefect.check(fresh_for=settings.prefect_check_seconds)
        only_started_by_actions = full or prefect_down is not None
        wait = 0 if only_started_by_actions else settings.claim_wait_seconds
        claimed = None
        try:
            with AGENT_CLAIM_SECONDS.time():
                claimed = await parts.api.claim(
                    settings.lease_seconds, wait, started_by_actions_only=only_started_by_actions
                )
        except Exception as error:  # the server may be restarting: keep trying
            log.warning("Could not claim a task: %s", describe_error(error))
            wait = 0
        if claimed is None:
            if wait == 0:  # a long poll has waited already
                self._slot_freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        _first(stop.wait(), self._slot_freed.wait()), settings.poll_seconds
                    )
            return
        self._claims[claimed.task_id] = claimed
        self._running[claimed.task_id] = asyncio.create_task(
            self._reconcile(parts, claimed), name=claimed.deployment.name
        )

    async def _warm_up(self, runner: ActionRunner) -> None:
        await runner.wait_until_ready()
        keep_started_objects_out_of_garbage_collections()
        self.warm.set()

    def _ports_of(self, parts: AgentParts, claimed: Claim) -> Ports:
        """The ports of one task: its Helm operations under the deployment's Helm lock, and its
        actions' flow runs cancelled from the Prefect UI cancelling it."""
        task_id = claimed.task_id
        return ports_of_task(
            parts,
            task_id,
            self.settings.lease_seconds,
            lambda: self._stop_cancelled(task_id),
            claimed.helm_lock,
        )

    def _stop_cancelled(self, task_id: int) -> None:
        """Stop the reconciliation of a task the server says was cancelled (its running action with it)."""
        running = self._running.get(task_id)
        if running is None or task_id in self._cancelled:
            return
        log.info("Task %s was cancelled: stopping its reconciliation; the cluster is left as it is", task_id)
        self._cancelled.add(task_id)
        running.cancel()

    async def _reconcile(self, parts: AgentParts, claimed: Claim) -> None:
        renewing = asyncio.create_task(self._renew(parts.api, claimed.task_id))
        TASKS_RUNNING.inc()
        ports = self._ports_of(parts, claimed)
        try:
            log.info("Task %s: %s of %s", claimed.task_id, claimed.change_type, claimed.deployment.name)
            await Reconciliation(ports, claimed).run()
            name = claimed.deployment.name
            if claimed.change_type is TaskType.DELETE:
                self._known.pop(name, None)
            else:
                self._known[name] = claimed
        except asyncio.CancelledError:
            if claimed.task_id not in self._cancelled:
                raise
            log.info("Task %s: stopped, as it was cancelled", claimed.task_id)
            await self._say_stopped(parts.api, claimed.task_id)
        except ServerError as error:
            if error.task_cancelled:
                log.info("Task %s: stopped, as it was cancelled (%s)", claimed.task_id, error)
                await self._say_stopped(parts.api, claimed.task_id)
            elif error.task_lost:
                log.warning(
                    "Task %s had ended on the server before this agent ended it: %s", claimed.task_id, error
                )
            else:
                log.error(
                    "Task %s could not be ended (%s); the server ends it once its lease runs out",
                    claimed.task_id,
                    error,
                )
        except Exception as error:
            log.exception(
                "Task %s could not be ended (%s); the server ends it once its lease runs out",
                claimed.task_id,
                describe_error(error),
            )
        finally:
            TASKS_RUNNING.dec()
            renewing.cancel()
            if isinstance(ports.helm, LockedHelmReleases):  # stopped before its first Helm operation
                with contextlib.suppress(Exception):
                    await ports.helm.let_go_of_an_unused_claim_lock()
            self._running.pop(claimed.task_id, None)
            self._claims.pop(claimed.task_id, None)
            self._reported.pop(claimed.deployment.name, None)  # the task reported what it left
            self._cancelled.discard(claimed.task_id)
            self._slot_freed.set()

    @staticmethod
    async def _say_stopped(api: ServerApi, task_id: int) -> None:
        try:
            await api.work_stopped(task_id)
        except ServerError as error:  # only `tasks cancel --wait` waits for it
            log.warning("Could not say that cancelled task %s stopped: %s", task_id, error)

    async def _report_periodically(self, parts: AgentParts, stop: asyncio.Event) -> None:
        """Report the component workloads of known deployments that run no task now, every so often:
        what changed since the last report at once, the rest every ``UNCHANGED_REPORT_ROUNDS`` rounds
        (the time the page shows them seen at), a tenth of them in each round. Two hundred deployments
        reported unchanged every 30 s cost the idle stack 8.5% of a core, a request each to the
        server; all of them told again in the same round made that round's 30 s cost 12%."""
        rounds = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.status_seconds)
            rounds += 1
            busy = self._running_names()
            listed = await self._list_component_workloads(parts) if self._known.keys() - busy else None
            for name, claimed in list(self._known.items()):
                if stop.is_set() or name in busy:
                    continue
                try:
                    refresh = (rounds + zlib.crc32(name.encode())) % UNCHANGED_REPORT_ROUNDS == 0
                    told = None if refresh else self._reported.get(name)
                    seen = await Reconciliation(parts.ports, claimed).report_components(told, listed)
                except Exception as error:  # reporting must never stop the agent
                    log.warning("Could not report the components of %s: %s", name, error)
                    seen = None
                if seen is None or name in self._running_names():
                    self._reported.pop(name, None)  # a task reports too: tell the next round's view
                else:
                    self._reported[name] = seen

    async def _list_component_workloads(self, parts: AgentParts) -> dict[WorkloadKey, WorkloadView] | None:
        """The labelled component workloads of the cluster, for a round of reports; None when the
        cluster refuses to list them, and each workload is then read on its own (said once)."""
        try:
            return await parts.ports.cluster.component_workloads(WORKLOAD_KINDS)
        except Exception as error:
            if not self._said_unlisted:
                self._said_unlisted = True
                log.info(
                    "The component workloads could not be listed across namespaces (%s); each is read "
                    "on its own instead (as expected where the agent's RBAC covers some namespaces only).",
                    describe_error(error),
                )
            return None

    def _running_names(self) -> set[str]:
        return {str(task.get_name()) for task in self._running.values()}

    async def _check_backup_locations(self, parts: AgentParts, stop: asyncio.Event) -> None:
        """Check each backup location an administrator sets for this cluster, and report how it went."""
        while not stop.is_set():
            try:
                asking = asyncio.ensure_future(parts.api.next_location_check(LOCATION_WAIT_SECONDS))
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait({asking, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not asking.done():  # stopped while waiting
                    asking.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await asking
                    return
                pending = asking.result()
                if pending is not None:
                    location_id, location = pending
                    error = await check_location(location, parts.ports.backup_storage)
                    await parts.api.record_location_check(location_id, error)
                continue
            except Exception as error:  # checking must never stop the agent
                log.warning("Could not check a backup location: %s", describe_error(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LOCATION_RETRY_SECONDS)

    async def _renew(self, api: ServerApi, task_id: int) -> None:
        """Renew the task's lease every third of it (at most ``CANCEL_CHECK_SECONDS`` apart); after a
        failure, again within a second or two. An answer that the task was cancelled stops its
        reconciliation.

        A lease runs out only when the agent is gone, never because one renewal met a busy server.
        """
        lease = self.settings.lease_seconds
        every = min(lease / 3, CANCEL_CHECK_SECONDS)
        delay = every
        while True:
            await asyncio.sleep(delay)
            try:
                await api.renew_lease(task_id, lease)
                delay = every
            except ServerError as error:
                if error.task_cancelled:
                    self._stop_cancelled(task_id)
                    return
                if error.task_lost:
                    log.error("Task %s is no longer this agent's: %s", task_id, error)
                    return
                log.warning("Could not renew the lease of task %s (trying again): %s", task_id, error)
                delay = min(2.0, lease / 6)


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return as soon as one of ``waits`` returns; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
