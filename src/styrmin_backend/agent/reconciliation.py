"""One reconciliation: a claimed change's plan, run step by step over the agent's ports.

What runs is decided first, in the domain (``domain.plan.decide``): the steps in order, each with its
operation. This module only carries them out: it records each step, does its operation through the
ports (``agent.ports``), and ends the task, however it ends. A failed step fails the task and later
steps do not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.agent import backups
from styrmin_backend.agent.backup_storage import BackupStorage
from styrmin_backend.agent.failures import StepFailed
from styrmin_backend.agent.ports import ActionResult, ChartRequest, Ports, WorkloadKey, WorkloadView
from styrmin_backend.agent.prefect.health import prefect_unreachable_error
from styrmin_backend.agent.server_api import ServerError, describe_error
from styrmin_backend.cluster import ClusterError, ReplicasChanged
from styrmin_backend.domain import steps
from styrmin_backend.domain.deployments import later_revision_wins
from styrmin_backend.domain.plan import (
    Operation,
    Plan,
    PlannedStep,
    UnplannableChange,
)
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.secrets import conceal_configuration
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.drivers import DeploymentConfiguration, DriverSpec
from styrmin_backend.protocol import (
    AppliedVersions,
    BackupChange,
    Claim,
    ComponentStatus,
    DeleteBackupChange,
    RestoreChange,
    TaskResult,
    plan_change,
    plan_needs_actions,
)

__all__ = ["CHART_TIMEOUT_SECONDS", "Reconciliation", "StepFailed"]

log = logging.getLogger("styrmin.agent")
CHART_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Target:
    """What this change moves the deployment to (the server resolved it), its configuration parsed."""

    driver_version: str
    app_version: str
    current_app_version: str | None
    configuration: DeploymentConfiguration
    stopped_components: list[str]


COMPONENT_READS_AT_ONCE = 8
"""Workloads a task's end reads at the same time to report its components: one round trip for the
usual driver, instead of one per component, and a bound on what a driver of many components asks
of the cluster at once."""


class Reconciliation:
    """Carries out one claimed task and ends it, however it ends."""

    def __init__(self, ports: Ports, claim: Claim) -> None:
        self.ports = ports
        self.claim = claim
        self.deployment = claim.deployment
        self.name: str = claim.deployment.name
        self.namespace: str = claim.deployment.namespace
        resolved = claim.change.target
        self.target = Target(
            driver_version=resolved.driver_version,
            app_version=resolved.app_version,
            current_app_version=resolved.current_app_version,
            configuration=DeploymentConfiguration.model_validate(resolved.configuration),
            stopped_components=list(resolved.stopped_components),
        )
        self._result = TaskResult()
        self._succeeded_step: int | None = None
        """The step that succeeded last, whose end the server has not been told yet: the next step's
        start tells it first, or the task's end carries it (one call less per task)."""
        self._started_step = claim.first_step
        """The first step, as the server started it with the claim; None once used (or not started)."""
        self._hook_context: dict[str, Any] = {}
        """More fields of the actions' GlobalContext (a backup's id and folder)."""
        self._configured_replicas_applied: dict[tuple[str, str], int] = {}
        """(kind, name) of each component workload -> the replicas the chart this task applied
        configures for it: what a start waits for, without reading the workload back."""
        self._storage: BackupStorage | None = None
        self._backup_folder: Path | None = None

    async def run(self) -> None:
        """Run the plan and end the task: succeeded, or failed with the failing step's error.

        The task ends in one call that also ends its last step and reports the components.
        """
        error: str | None = None
        components: list[ComponentStatus] | None = None
        reports = self.claim.change.type is not TaskType.DELETE
        server = self.ports.server
        try:
            await self._workflow()
            if reports:
                components = await self._components()
        except StepFailed as failed:
            error = str(failed)
        except Exception as unexpected:  # a bug: say so, keep the agent running
            log.exception("Task %s failed unexpectedly", self.claim.task_id)
            error = redact(
                f"Styrmin's agent hit an unexpected error: {describe_error(unexpected)}",
                [self.claim.actions_token],
            )
        if error is not None:
            with contextlib.suppress(Exception):  # the task's end ends a step still running, failed
                await self._steps_ended()
            if reports:
                components = await self._components()
        last_step, self._succeeded_step = self._succeeded_step, None  # None after a failure: told
        locks_left = False  # the Helm locks still held after their operations, let go of with the end
        with contextlib.suppress(Exception):  # logged where it failed; the lease runs out instead
            locks_left = await self.ports.helm.settled(with_end=True)
        try:
            await server.end_task(
                self.claim.task_id, error, self._result, components, last_step, release_helm_locks=locks_left
            )
        except ServerError as refused:
            if (components is None and last_step is None and not locks_left) or refused.status_code != 422:
                raise
            # A server older than the combined call refuses its unknown fields: separate calls instead.
            log.warning(
                "The server refused the combined end of task %s (%s); sent apart.",
                self.claim.task_id,
                refused,
            )
            if locks_left:
                await self.ports.helm.settled()  # let go of by calls of their own
            if last_step is not None:
                await server.end_step(last_step, None)
            if components is not None:
                await self._report(components)
            await server.end_task(self.claim.task_id, error, self._result)

    async def report_components(
        self,
        unless: list[ComponentStatus] | None = None,
        listed: Mapping[WorkloadKey, WorkloadView] | None = None,
    ) -> list[ComponentStatus] | None:
        """Tell the server what the component workloads look like now, unless that is ``unless`` (what
        was told last); returns what was seen, None when it could not be read (best effort: never
        fails the task). A workload found in ``listed`` (``Cluster.component_workloads``) is not read
        again."""
        components = await self._components(listed)
        if components is not None and components != unless:
            await self._report(components)
        return components

    async def _report(self, components: list[ComponentStatus]) -> None:
        try:
            await self.ports.server.report_components(self.name, components)
        except Exception as error:
            log.warning("Could not report the components of %s: %s", self.name, error)

    async def _components(
        self, listed: Mapping[WorkloadKey, WorkloadView] | None = None
    ) -> list[ComponentStatus] | None:
        """What the component workloads look like now (those in ``listed`` as listed); None when they
        cannot be read (logged).

        Without ``listed``, the deployment's labelled workloads are listed, one request per kind
        instead of one per component. The workloads not listed (applied before the agent labelled
        them, or missing) are read side by side, a few at a time.
        """
        reading = asyncio.Semaphore(COMPONENT_READS_AT_ONCE)

        async def read(kind: str, name: str) -> WorkloadView | None:
            workload = (listed or {}).get(WorkloadKey(self.namespace, kind, name))
            if workload is not None:
                return workload
            try:  # not listed: applied before the agent labelled its workloads, or missing
                async with reading:
                    return await self.ports.cluster.workload(self.namespace, kind, name)
            except ClusterError:
                return None

        try:
            spec = await self._spec()
            components = spec.spec.components
            names = [(c.workload.kind, c.workload.resolved_name(self.name)) for c in components]
            if listed is None and names:
                listed = await self._listed_workloads({kind for kind, _ in names})
            read_all = await asyncio.gather(*(read(kind, name) for kind, name in names))
            statuses = []
            for component, (kind, name), workload in zip(components, names, read_all, strict=True):
                if workload is None:
                    continue
                containers = list(workload.containers)
                first = (
                    [c for c in containers if c.name == component.container] if component.container else []
                )
                ordered = first + [c for c in containers if c not in first]
                statuses.append(
                    ComponentStatus(
                        name=component.name,
                        kind=kind,
                        workload=name,
                        replicas=workload.replicas,
                        ready_replicas=workload.ready_replicas,
                        images=[c.image for c in ordered],
                    )
                )
            return statuses
        except Exception as error:
            log.warning("Could not read the components of %s: %s", self.name, error)
            return None

    async def _listed_workloads(self, kinds: set[str]) -> Mapping[WorkloadKey, WorkloadView]:
        """The deployment's labelled workloads of ``kinds``; none when the cluster refuses the
        listing (each is read on its own then)."""
        try:
            return await self.ports.cluster.deployment_workloads(self.namespace, self.name, sorted(kinds))
        except ClusterError as error:
            log.info("The workloads of %s could not be listed (%s); each is read", self.name, error)
            return {}

    async def _steps_ended(self) -> None:
        """Tell the server the end of the step that succeeded last; raises as ``end_step`` does."""
        succeeded, self._succeeded_step = self._succeeded_step, None
        if succeeded is not None:
            await self.ports.server.end_step(succeeded, None)

    # --- the plan --------------------------------------------------------------------------------

    async def plan(self) -> Plan:
        """The plan of the claimed change, from the driver's actions at the target version."""
        change = self.claim.change
        spec = await self._spec() if plan_needs_actions(change) else None
        try:
            return plan_change(change, spec)
        except UnplannableChange:
            raise StepFailed(f"This agent cannot run {change.type} tasks yet.") from None

    async def _workflow(self) -> None:
        change = self.claim.change
        backs_up = isinstance(change, BackupChange | RestoreChange | DeleteBackupChange)
        if backs_up and self.ports.backup_storage is None:
            raise StepFailed(backups.NO_BACKUP_STORAGE_ERROR)
        plan = await self.plan()
        if isinstance(change, BackupChange):
            storage = self._storage = await backups.open_storage(self.ports.backup_storage, change)
            self._backup_folder = await backups.prepare_folder(storage, change.key)
            self._hook_context = await self._backup_hook_context(change, storage)
        elif isinstance(change, RestoreChange):
            self._storage = await backups.open_storage(self.ports.backup_storage, change)
        try:
            for step in plan:
                if step.operation is Operation.RUN_ACTIONS and isinstance(change, RestoreChange):
                    await self._steps_ended()  # before the folder is made, which can take a while
                    await self._prepare_restore_hook(change)
                async with self._step(step.name) as step_id:
                    await self._carry_out(step, step_id)
        finally:
            if isinstance(change, RestoreChange) and self._storage is not None:
                await backups.finish_restore(self._storage, change.key)
        if isinstance(change, RestoreChange):
            self._result.applied = AppliedVersions(
                app_version=self.target.app_version, driver_version=self.target.driver_version
            )

    async def _carry_out(self, step: PlannedStep, step_id: int) -> None:
        """The operation of one planned step."""
        change = self.claim.change
        operation = step.operation
        if operation is Operation.RUN_ACTIONS:
            await self._run_actions(step_id, step)
        elif operation is Operation.APPLY_CHART:
            await self._apply_chart(step_id)
        elif operation is Operation.STOP_COMPONENTS or operation is Operation.START_COMPONENTS:
            await self._scale_components(
                step_id, list(step.components), running=operation is Operation.START_COMPONENTS
            )
        elif operation is Operation.UNINSTALL:
            await self._uninstall(step_id)
        elif operation is Operation.RECORD_BACKUP_FILES:
            assert isinstance(change, BackupChange) and self._storage and self._backup_folder
            self._result.backup = await backups.record_files(self._storage, change.key, self._backup_folder)
        elif operation is Operation.CHECK_BACKUP_FILES:
            assert isinstance(change, RestoreChange) and self._storage is not None
            await backups.check_files(self._storage, change)
        elif operation is Operation.RESTORE_VERSION:
            await backups.bring_version_back(
                self.ports.linked,
                self.claim.styrmin_url,
                self.claim.actions_token,
                self.name,
                step_id,
                self.target.app_version,
                self.target.driver_version,
            )
        elif operation is Operation.DELETE_BACKUP_FILES:
            assert isinstance(change, DeleteBackupChange)
            self._result.deleted = await backups.delete_files(self.ports.backup_storage, change)
        else:  # pragma: no cover - decide() plans only the operations above
            raise StepFailed(f"This agent cannot carry out {operation} steps yet.")

    @asynccontextmanager
    async def _step(self, name: str) -> AsyncIterator[int]:
        server = self.ports.server
        await self._steps_ended()  # steps are recorded in order: the one before has ended
        started, self._started_step = self._started_step, None
        if started is not None and started.name == name:
            step_id = started.id  # the server started it with the claim
        else:
            if started is not None:  # a bug: the server planned otherwise with the same PLAN_VERSION
                await server.end_step(
                    started.id,
                    f"Not run: the server started this step with the claim, but the agent's plan starts "
                    f"with {name!r}. Report this; run the server and the agent at one Styrmin version.",
                )
            step_id = await server.add_step(self.claim.task_id, name)
        try:
            yield step_id
        except StepFailed as failed:
            await server.end_step(step_id, str(failed))
            raise
        except Exception as unexpected:
            log.exception("Step %r of task %s failed", name, self.claim.task_id)
            message = redact(f"{name} failed: {describe_error(unexpected)}", [self.claim.actions_token])
            await server.end_step(step_id, message)
            raise StepFailed(message) from unexpected
        # Told with the next call: the next step's start follows at once, and the task's end carries the
        # last one, a few milliseconds after it really ended (the components are read in between).
        self._succeeded_step = step_id

    async def _spec(self) -> DriverSpec:
        return await self.ports.drivers.spec(self.deployment.driver, self.target.driver_version)

    async def _driver_dir(self) -> Path:
        return await self.ports.drivers.folder(self.deployment.driver, self.target.driver_version)

    # --- hooks ---------------------------------------------------------------------------------

    async def _backup_hook_context(
        self, change: BackupChange | RestoreChange, storage: BackupStorage
    ) -> dict[str, Any]:
        assert self.ports.backup_storage is not None
        return await backups.hook_context(
            self.ports.cluster, self.ports.backup_storage, self.name, self.namespace, change, storage
        )

    async def _prepare_restore_hook(self, change: RestoreChange) -> None:
        """Before the restore hook's first step: its context (the backup's folder and env)."""
        if not self._hook_context and self._storage is not None:
            self._hook_context = await self._backup_hook_context(change, self._storage)

    async def _run_actions(self, step_id: int, step: PlannedStep) -> None:
        assert step.hook is not None and step.mode is not None
        hook, mode = step.hook, step.mode
        spec = await self._spec()
        declared = {action.name for action in step.actions}
        actions = [a for a in spec.spec.actions if a.name in declared]
        driver_dir = await self._driver_dir()
        context = GlobalContext(
            deployment_id=self.deployment.id,
            deployment_name=self.name,
            namespace=self.namespace,
            cluster_id=self.deployment.cluster,
            driver_name=self.deployment.driver,
            driver_version=self.target.driver_version,
            current_app_version=self.target.current_app_version,
            target_app_version=self.target.app_version,
            configuration=self.target.configuration,
            revision=self.claim.revision,
            task_id=self.claim.task_id,
            hook_step_id=step_id,
            hook=hook,
            mode=mode,
            api_url=self.claim.styrmin_url,
            **self._hook_context,
        )
        parameters = {"context": context.model_dump(mode="json"), "target_version": self.target.app_version}
        env = {
            "STYRMIN_TOKEN": self.claim.actions_token,
            "STYRMIN_URL": self.claim.styrmin_url,
            **self.ports.cluster.action_env(),  # for get_component_images, execute_commands
        }
        server = self.ports.server

        def linker(action_name: str) -> Callable[[str], Awaitable[None]]:
            """Link the step to the flow run as soon as it exists (a note each when several run)."""

            async def link(flow_run_id: str) -> None:
                if len(actions) == 1:
                    await server.set_flow_run(step_id, flow_run_id)
                else:
                    await server.add_note(step_id, f"Action {action_name} runs as flow run {flow_run_id}.")

            return link

        prefect = self.ports.prefect
        # The agent's view may be older than its last check (a claim that waited on the server
        # through an outage, or a server back since): only a check now refuses the step.
        if (
            prefect is not None
            and prefect.error is not None
            and (reason := await prefect.check()) is not None
        ):
            raise StepFailed(prefect.error or prefect_unreachable_error(prefect.api_url, reason))
        running = asyncio.gather(
            *(
                self.ports.runner.run_action(
                    driver_dir,
                    action.location,
                    parameters,
                    env,
                    action.timeout,
                    flow_run_name=f"{self.name}-r{self.claim.revision}-{action.name}",
                    tags=[f"deployment:{self.name}", f"hook:{hook.value}", f"mode:{mode.value}"],
                    on_flow_run=linker(action.name),
                )
                for action in actions
            )
        )
        outcomes = await self._unless_prefect_goes_away(running, [a.name for a in actions])
        failed = [(a, o) for a, o in zip(actions, outcomes, strict=True) if not o.succeeded]
        if failed:
            errors = [f"Action {a.name} failed: {o.error}" for a, o in failed]
            if prefect is not None and (reason := await prefect.check()) is not None:
                errors.insert(0, prefect_unreachable_error(prefect.api_url, reason))
            raise StepFailed(redact("\n".join(errors), [self.claim.actions_token]))

    async def _unless_prefect_goes_away(
        self, running: asyncio.Future[list[ActionResult]], names: list[str]
    ) -> list[ActionResult]:
        """The outcomes of the running actions; when the Prefect server goes away first, they are
        stopped (their processes killed) and the step fails, naming it."""
        prefect = self.ports.prefect
        if prefect is None:
            return await running
        away: asyncio.Future[Any] = asyncio.ensure_future(prefect.away.wait())
        either: list[asyncio.Future[Any]] = [running, away]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            running.cancel()  # the task was cancelled: stop its actions (asyncio.wait leaves them running)
            raise
        finally:
            away.cancel()
        if running.done():
            return running.result()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running
        stopped = ", ".join(names)
        raise StepFailed(f"{prefect.error} Styrmin stopped the action(s) that were running: {stopped}.")

    # --- chart and components --------------------------------------------------------------------

    async def _write_styrmin_deployment(self, step_id: int) -> bool:
        """Write the change's configuration into the cluster; False when a later revision is there."""
        spec = {
            "driver": self.deployment.driver,
            "driverVersion": self.target.driver_version,
            "appVersion": self.target.app_version,
            # Secrets shown only as set: whoever may read StyrminDeployments may not read Secrets.
            "configuration": conceal_configuration(self.target.configuration.model_dump(mode="json")),
            "stoppedComponents": self.target.stopped_components,
        }
        cluster = self.ports.cluster
        await cluster.ensure_namespace(self.namespace)
        later = await cluster.write_styrmin_deployment(self.namespace, self.name, spec, self.claim.revision)
        if later is not None:
            await self.ports.server.add_note(step_id, steps.later_revision_note(later, self.claim.revision))
            return False
        return True

    async def _apply_chart(self, step_id: int, *, replicas_only: bool = False) -> bool:
        """Write the StyrminDeployment and apply the chart; False when a later revision was there.

        ``replicas_only``: a stop or start, which Helm may leave to the components' replicas
        (``Helm.apply``)."""
        request = ChartRequest(
            driver_dir=await self._driver_dir(),
            spec=await self._spec(),
            release=self.name,
            namespace=self.namespace,
            app_version=self.target.app_version,
            configuration=self.target.configuration,
            stopped_components=tuple(self.target.stopped_components),
            is_upgrade=self.claim.change.type is not TaskType.CREATE,
        )
        helm = self.ports.helm
        # The chart renders while the StyrminDeployment is written: it is applied only once the
        # write shows no later revision, and left unused when one is there.
        rendering = asyncio.ensure_future(helm.prepare(request))
        written = False
        try:
            written = await self._write_styrmin_deployment(step_id)
        finally:
            await asyncio.wait([rendering])
            if not written and not rendering.cancelled() and rendering.exception() is None:
                await rendering.result().discard()  # a chart that does not render matters only when applied
        if not written:
            return False
        chart = rendering.result()
        try:
            recovered = await helm.apply(
                chart, self.name, self.namespace, CHART_TIMEOUT_SECONDS, replicas_only=replicas_only
            )
            self._configured_replicas_applied = chart.configured_replicas()
        finally:
            await chart.discard()
        if recovered is not None:
            await self.ports.server.add_note(step_id, recovered)
        self._result.applied = AppliedVersions(
            app_version=self.target.app_version, driver_version=self.target.driver_version
        )
        return True

    async def _uninstall(self, step_id: int) -> None:
        removed = await self.ports.helm.uninstall(self.name, self.namespace, CHART_TIMEOUT_SECONDS)
        await self.ports.cluster.delete_styrmin_deployment(self.namespace, self.name)
        if not removed:
            await self.ports.server.add_note(step_id, f"Release {self.name} was not installed.")

    async def _scale_components(self, step_id: int, components: list[str], running: bool) -> None:
        # It applies the deployment's current configuration, with the stopped components at zero
        # replicas. When that is the release as last applied but for those replicas, the Helm port sets
        # them in place, as Helm's own field manager (one owner of .spec.replicas, so later Helm
        # upgrades never conflict with it); otherwise it is a Helm upgrade like any other.
        spec = await self._spec()
        # The task uses the deployment's current configuration, which includes later changes: when
        # one of them stops (or starts) a component again, this task can never get it there.
        undone = [c for c in components if (c in self.target.stopped_components) == running]
        if undone:
            verb, again = ("start", "stops") if running else ("stop", "starts")
            raise StepFailed(
                f'Cannot {verb} {", ".join(undone)} of deployment "{self.name}": a later change {again} '
                f"{'it' if len(undone) == 1 else 'them'} again, and a task uses the deployment's current "
                "configuration, so this one could never get there; it changed nothing. The later change "
                "decides; request this one again if it should still apply."
            )
        if not await self._apply_chart(step_id, replicas_only=True):
            return
        by_name = {c.name: c for c in spec.spec.components}
        cluster = self.ports.cluster
        for name in components:
            component = by_name[name]
            kind, workload = component.workload.kind, component.workload.resolved_name(self.name)
            replicas = self._configured_replicas_applied.get((kind, workload)) if running else 0
            if replicas is None:  # a workload the chart does not hold: read what it says
                replicas = await self._configured_replicas(kind, workload)
            try:
                await cluster.wait_scaled(self.namespace, kind, workload, replicas, CHART_TIMEOUT_SECONDS)
            except ReplicasChanged as changed:
                raise StepFailed(await self._scaled_meanwhile(name, replicas, changed.replicas)) from None

    async def _scaled_meanwhile(self, component: str, waited_for: int, now: int) -> str:
        """The error of a stop or start whose component another change scaled while it waited."""
        later = await self.ports.cluster.styrmin_deployment_revision(self.namespace, self.name)
        by = (
            f"a later change (revision {later})"
            if later_revision_wins(later, self.claim.revision)
            else "another change, or someone outside Styrmin,"
        )
        return (
            f'Component "{component}" of deployment "{self.name}" was scaled to {now} replicas by {by} '
            f"while this task waited for it to reach {waited_for}, so it never will. The later change "
            "decides; request this one again if it should still apply."
        )

    async def _configured_replicas(self, kind: str, workload: str) -> int:
        """The replicas the chart sets for a workload (recorded on it when the chart was applied)."""
        current = await self.ports.cluster.workload(self.namespace, kind, workload)
        return 1 if current.configured_replicas is None else current.configured_replicas
