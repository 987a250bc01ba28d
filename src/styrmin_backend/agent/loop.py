"""The agent: claims tasks of its cluster and runs each as a reconciliation, renewing its lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from pathlib import Path

from styrmin_backend.agent.drivers_cache import DriverCache
from styrmin_backend.agent.prefect import ActionRunner
from styrmin_backend.agent.reconciliation import AgentParts, Reconciliation
from styrmin_backend.agent.server_api import ClaimedTask, ServerApi
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.cluster import ClusterAccess, HelmReleases
from styrmin_backend.cluster.connection import ClusterConnection
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.metrics import AGENT_CLAIM_SECONDS, RUNNER_POOL_SIZE, TASKS_RUNNING

log = logging.getLogger("styrmin.agent")


ORPHANED_RUN_MESSAGE = (
    "The Styrmin agent that ran this action stopped before the action ended, and its processes with it; "
    'the Styrmin task ends failed ("The agent stopped while it ran this task").'
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


class Agent:
    """Runs the changes of one cluster; stop it by setting the event given to :meth:`run`."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self._running: dict[int, asyncio.Task[None]] = {}
        self._known: dict[str, ClaimedTask] = {}
        """The latest task of each deployment this agent ran, to report its components between tasks."""
        self.warm = threading.Event()
        """Set once the agent serves and its action processes are all started (from any thread)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run tasks until ``stop`` is set; then let the running ones end."""
        settings = self.settings
        connection = ClusterConnection.find(settings.kubeconfig, settings.service_account_dir)
        log.info("Reaching the cluster through %s", connection.describe())
        api = ServerApi(settings.server_url, settings.key.get_secret_value())
        cluster = ClusterAccess(connection)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        previous, instance = _new_instance(settings.data_dir)
        runner = ActionRunner(settings.prefect_api_url, pool_size=settings.runner_pool_size, owner=instance)
        RUNNER_POOL_SIZE.set(settings.runner_pool_size)
        parts = AgentParts(
            api, cluster, HelmReleases(connection), runner, DriverCache(api, settings.data_dir / "drivers")
        )
        try:
            await cluster.ensure_crd()
            await runner.start()
            if previous:
                await _crash_orphaned_runs(runner, previous)
            log.info("Agent serving; Prefect at %s", runner.api_url)
            warming = asyncio.create_task(self._warm_up(runner))
            reporting = asyncio.create_task(self._report_periodically(parts, stop))
            while not stop.is_set():
                claimed, idle = None, True
                if len(self._running) < settings.concurrency:
                    try:
                        with AGENT_CLAIM_SECONDS.time():
                            claimed = await api.claim(settings.lease_seconds, settings.claim_wait_seconds)
                        idle = settings.claim_wait_seconds == 0  # a long poll has waited already
                    except Exception as error:  # the server may be restarting: keep trying
                        log.warning("Could not claim a task: %s", error)
                if claimed is None:
                    if idle:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), settings.poll_seconds)
                    continue
                self._running[claimed.task_id] = asyncio.create_task(
                    self._reconcile(parts, claimed), name=str(claimed.deployment["name"])
                )
            if self._running:
                await self._end_running_tasks(api)
            await reporting
            warming.cancel()
        finally:
            await runner.close()
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

    async def _warm_up(self, runner: ActionRunner) -> None:
        await runner.wait_until_ready()
        self.warm.set()

    async def _reconcile(self, parts: AgentParts, claimed: ClaimedTask) -> None:
        renewing = asyncio.create_task(self._renew(parts.api, claimed.task_id))
        TASKS_RUNNING.inc()
        try:
            log.info("Task %s: %s of %s", claimed.task_id, claimed.change_type, claimed.deployment["name"])
            await Reconciliation(parts, claimed).run()
            name = str(claimed.deployment["name"])
            if claimed.change_type is TaskType.DELETE:
                self._known.pop(name, None)
            else:
                self._known[name] = claimed
        except Exception:
            log.exception("Task %s could not be ended; its lease will run out", claimed.task_id)
        finally:
            TASKS_RUNNING.dec()
            renewing.cancel()
            self._running.pop(claimed.task_id, None)

    async def _report_periodically(self, parts: AgentParts, stop: asyncio.Event) -> None:
        """Report the component workloads of known deployments that run no task now, every so often."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.status_seconds)
            busy = {str(task.get_name()) for task in self._running.values()}
            for name, claimed in list(self._known.items()):
                if stop.is_set() or name in busy:
                    continue
                try:
                    await Reconciliation(parts, claimed).report_components()
                except Exception as error:  # reporting must never stop the agent
                    log.warning("Could not report the components of %s: %s", name, error)

    async def _renew(self, api: ServerApi, task_id: int) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_seconds / 3)
            try:
                await api.renew_lease(task_id, self.settings.lease_seconds)
            except Exception as error:
                log.warning("Could not renew the lease of task %s: %s", task_id, error)
