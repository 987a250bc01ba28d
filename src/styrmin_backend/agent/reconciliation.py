"""One reconciliation: the workflow of a claimed task, step by step, as the seed describes it.

Order across modes is fixed (pre, then the core operation, then post); the actions of one mode run
concurrently and their step waits for all of them. A failed step fails the task and later modes do
not run. A mode without actions records no step, except the upgrade hook's core, which always runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.agent.backup_storage import BackupFolder
from styrmin_backend.agent.backups import run_backup, run_backup_delete, run_restore
from styrmin_backend.agent.drivers_cache import DriverCache
from styrmin_backend.agent.prefect import ActionOutcome, ActionRunner
from styrmin_backend.agent.prefect.health import PrefectWatch, prefect_unreachable_error
from styrmin_backend.agent.server_api import ServerApi, ServerError, StyrminAway, describe_error
from styrmin_backend.cluster import ClusterAccess, ClusterError, HelmReleases, ReplicasChanged
from styrmin_backend.domain import steps
from styrmin_backend.domain.deployments import later_revision_wins
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.secrets import conceal_configuration
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.drivers import DeploymentConfiguration, DriverSpec, InstallChart, prepare_install_chart
from styrmin_backend.protocol import (
    AppliedVersions,
    Claim,
    ComponentStatus,
    StartChange,
    StopChange,
    TaskResult,
    UpgradeChange,
)

log = logging.getLogger("styrmin.agent")
CHART_TIMEOUT_SECONDS = 600


class StepFailed(Exception):
    """A step failed; the message is its error, as users read it."""


@dataclass(frozen=True)
class AgentParts:
    """What every reconciliation of one agent shares."""

    api: ServerApi
    cluster: ClusterAccess
    helm: HelmReleases
    runner: ActionRunner
    drivers: DriverCache
    prefect: PrefectWatch | None = None
    """The agent's watch of the Prefect server: actions stop when it goes away."""
    backup_storage: BackupFolder | None = None
    """Where backups' files are written and read; None when the agent has none (backups then fail)."""


@dataclass(frozen=True)
class Target:
    """What this change moves the deployment to (the server resolved it), its configuration parsed."""

    driver_version: str
    app_version: str
    current_app_version: str | None
    configuration: DeploymentConfiguration
    stopped_components: list[str]


class Reconciliation:
    """Carries out one claimed task and ends it, however it ends."""

    def __init__(self, parts: AgentParts, claim: Claim) -> None:
        self.parts = parts
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
        self._ending_steps: list[asyncio.Future[None]] = []
        """Ends of succeeded steps sent to the server, whose answers are still awaited."""
        self.extra_context: dict[str, Any] = {}
        """More fields of the actions' GlobalContext (a backup's id and folder)."""

    async def run(self) -> None:
        """Run the workflow and end the task: succeeded, or failed with the failing step's error.

        The task ends in one call that also reports the components; the last step's end is sent
        before the components are read and answered while they are.
        """
        error: str | None = None
        components: list[ComponentStatus] | None = None
        reports = self.claim.change.type is not TaskType.DELETE
        try:
            await self._workflow()
            ended = await asyncio.gather(self._steps_ended(), self._components() if reports else _nothing())
            components = ended[1]
        except (StepFailed, StyrminAway) as failed:  # StyrminAway: no server served within the retry time
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
        try:
            await self.parts.api.end_task(self.claim.task_id, error, self._result, components)
        except ServerError as refused:
            if components is None or refused.status_code != 422:
                raise
            # A server older than the combined call refuses its unknown field: the two calls instead.
            log.warning("The server refused the components with the task's end (%s); sent apart.", refused)
            await self._report(components)
            await self.parts.api.end_task(self.claim.task_id, error, self._result)

    async def report_components(self) -> None:
        """Tell the server what the component workloads look like now (best effort: never fails the task)."""
        components = await self._components()
        if components is not None:
            await self._report(components)

    async def _report(self, components: list[ComponentStatus]) -> None:
        try:
            await self.parts.api.report_components(self.name, components)
        except Exception as error:
            log.warning("Could not report the components of %s: %s", self.name, error)

    async def _components(self) -> list[ComponentStatus] | None:
        """What the component workloads look like now; None when they cannot be read (logged)."""
        try:
            spec = await self._spec()
            statuses = []
            for component in spec.spec.components:
                kind, name = component.workload.kind, component.workload.resolved_name(self.name)
                try:
                    workload = await self.parts.cluster.workload(self.namespace, kind, name)
                except ClusterError:
                    continue
                pod = workload.spec.template.spec if workload.spec else None
                containers = list(pod.containers) if pod else []
                first = (
                    [c for c in containers if c.name == component.container] if component.container else []
                )
                ordered = first + [c for c in containers if c not in first]
                status = workload.status
                statuses.append(
                    ComponentStatus(
                        name=component.name,
                        kind=kind,
                        workload=name,
                        replicas=int(workload.spec.replicas or 0) if workload.spec else 0,
                        ready_replicas=int((status.readyReplicas if status else 0) or 0),
                        images=[c.image or "" for c in ordered],
                    )
                )
            return statuses
        except Exception as error:
            log.warning("Could not read the components of %s: %s", self.name, error)
            return None

    async def _steps_ended(self) -> None:
        """Wait for the answers to the ends of succeeded steps; raises as ``end_step`` does."""
        ending, self._ending_steps = self._ending_steps, []
        for answer in ending:
            await answer

    async def _workflow(self) -> None:
        change = self.claim.change
        kind = change.type
        if kind is TaskType.CREATE:
            await self._run_hook_mode(Hook.SETUP, Mode.PRE)
            async with self._step(steps.INSTALL_STEP) as step_id:
                await self._apply_chart(step_id)
            await self._run_hook_mode(Hook.SETUP, Mode.POST)
        elif isinstance(change, UpgradeChange) and change.run_hooks:
            await self._run_hook_mode(Hook.UPGRADE, Mode.PRE)
            spec = await self._spec()
            core = spec.spec.actions_of(Hook.UPGRADE, Mode.CORE)
            async with self._step(hook_step_name(Hook.UPGRADE, Mode.CORE)) as step_id:
                if core:
                    await self._run_actions(step_id, Hook.UPGRADE, Mode.CORE)
                else:
                    await self._apply_chart(step_id)
            await self._run_hook_mode(Hook.UPGRADE, Mode.POST)
        elif kind is TaskType.UPGRADE:
            async with self._step(steps.APPLY_VERSION_STEP) as step_id:
                await self._apply_chart(step_id)
        elif kind is TaskType.CONFIGURE:
            async with self._step(steps.APPLY_CONFIGURATION_STEP) as step_id:
                await self._apply_chart(step_id)
        elif isinstance(change, StopChange | StartChange):
            running = isinstance(change, StartChange)
            async with self._step(steps.START_STEP if running else steps.STOP_STEP) as step_id:
                await self._scale_components(step_id, change.components, running)
        elif kind is TaskType.DELETE:
            async with self._step(steps.UNINSTALL_STEP) as step_id:
                removed = await self.parts.helm.uninstall(self.name, self.namespace, CHART_TIMEOUT_SECONDS)
                await self.parts.cluster.delete_styrmin_deployment(self.namespace, self.name)
                if not removed:
                    await self.parts.api.add_note(step_id, f"Release {self.name} was not installed.")
        elif kind in (TaskType.BACKUP, TaskType.RESTORE, TaskType.DELETE_BACKUP):
            storage = self.parts.backup_storage
            if storage is None:
                raise StepFailed("This agent has no backup storage location; set STYRMIN_AGENT_BACKUP_DIR.")
            workflow = {TaskType.BACKUP: run_backup, TaskType.RESTORE: run_restore}.get(
                kind, run_backup_delete
            )
            await workflow(self, storage)
        else:
            raise StepFailed(f"This agent cannot run {kind} tasks yet.")

    @asynccontextmanager
    async def _step(self, name: str) -> AsyncIterator[int]:
        await self._steps_ended()  # steps are recorded in order: the one before has ended
        step_id = await self.parts.api.add_step(self.claim.task_id, name)
        try:
            yield step_id
        except StepFailed as failed:
            await self.parts.api.end_step(step_id, str(failed))
            raise
        except Exception as unexpected:
            log.exception("Step %r of task %s failed", name, self.claim.task_id)
            message = redact(f"{name} failed: {describe_error(unexpected)}", [self.claim.actions_token])
            await self.parts.api.end_step(step_id, message)
            raise StepFailed(message) from unexpected
        # Sent now, so the server records the step's real end; its answer is awaited before the next
        # step or the task's end, which meanwhile need not wait for it (run() reads the components).
        self._ending_steps.append(asyncio.ensure_future(self.parts.api.end_step(step_id, None)))

    async def _spec(self) -> DriverSpec:
        package = await self.parts.drivers.get(self.deployment.driver, self.target.driver_version)
        return package.spec

    async def _driver_dir(self) -> Path:
        return await self.parts.drivers.folder(self.deployment.driver, self.target.driver_version)

    # --- hooks ---------------------------------------------------------------------------------

    async def _run_hook_mode(self, hook: Hook, mode: Mode) -> None:
        spec = await self._spec()
        if not spec.spec.actions_of(hook, mode):
            return
        async with self._step(hook_step_name(hook, mode)) as step_id:
            await self._run_actions(step_id, hook, mode)

    async def _run_actions(self, step_id: int, hook: Hook, mode: Mode) -> None:
        spec = await self._spec()
        actions = spec.spec.actions_of(hook, mode)
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
            **self.extra_context,
        )
        parameters = {"context": context.model_dump(mode="json"), "target_version": self.target.app_version}
        env = {
            "STYRMIN_TOKEN": self.claim.actions_token,
            "STYRMIN_URL": self.claim.styrmin_url,
            **self.parts.cluster.connection.action_env(),  # for get_component_images, execute_commands
        }
        api = self.parts.api

        def linker(action_name: str) -> Callable[[str], Awaitable[None]]:
            """Link the step to the flow run as soon as it exists (a note each when several run)."""

            async def link(flow_run_id: str) -> None:
                if len(actions) == 1:
                    await api.set_flow_run(step_id, flow_run_id)
                else:
                    await api.add_note(step_id, f"Action {action_name} runs as flow run {flow_run_id}.")

            return link

        prefect = self.parts.prefect
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
                self.parts.runner.run_action(
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
        self, running: asyncio.Future[list[ActionOutcome]], names: list[str]
    ) -> list[ActionOutcome]:
        """The outcomes of the running actions; when the Prefect server goes away first, they are
        stopped (their processes killed) and the step fails, naming it."""
        prefect = self.parts.prefect
        if prefect is None:
            return await running
        away: asyncio.Future[Any] = asyncio.ensure_future(prefect.away.wait())
        either: list[asyncio.Future[Any]] = [running, away]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
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
        await self.parts.cluster.ensure_namespace(self.namespace)
        later = await self.parts.cluster.write_styrmin_deployment(
            self.namespace, self.name, spec, self.claim.revision
        )
        if later is not None:
            await self.parts.api.add_note(step_id, steps.later_revision_note(later, self.claim.revision))
            return False
        return True

    async def _apply_chart(self, step_id: int) -> bool:
        """Write the StyrminDeployment and apply the chart; False when a later revision was there."""
        package = await self.parts.drivers.get(self.deployment.driver, self.target.driver_version)
        driver_dir = await self._driver_dir()
        scratch = tempfile.TemporaryDirectory(prefix="styrmin-chart-")

        def prepare() -> InstallChart:
            # In a thread: rendering and the YAML round trips would hold up the agent's other tasks.
            chart = prepare_install_chart(
                driver_dir,
                package.spec,
                self.name,
                self.namespace,
                self.target.app_version,
                self.target.configuration,
                Path(scratch.name) / "chart",
                is_upgrade=self.claim.change.type is not TaskType.CREATE,
            )
            _keep_stopped_components_at_zero(
                chart.path, package.spec, self.name, self.target.stopped_components
            )
            return chart

        try:
            # The chart renders while the StyrminDeployment is written: it is applied only once the
            # write shows no later revision, and left unused when one is there.
            rendering = asyncio.ensure_future(asyncio.to_thread(prepare))
            written = False
            try:
                written = await self._write_styrmin_deployment(step_id)
            finally:
                await asyncio.wait([rendering])  # its thread writes into the scratch folder
                if not written and not rendering.cancelled():
                    rendering.exception()  # a chart that does not render matters only when applied
            if not written:
                return False
            chart = rendering.result()
            recovered = await self.parts.helm.apply(
                chart.path, chart.values, self.name, self.namespace, CHART_TIMEOUT_SECONDS
            )
        finally:
            await asyncio.to_thread(scratch.cleanup)
        if recovered is not None:
            await self.parts.api.add_note(step_id, recovered)
        self._result.applied = AppliedVersions(
            app_version=self.target.app_version, driver_version=self.target.driver_version
        )
        return True

    async def _scale_components(self, step_id: int, components: list[str], running: bool) -> None:
        # Through Helm, like every other write to the workloads: one owner of .spec.replicas, so later
        # Helm upgrades never conflict with it. It applies the deployment's current configuration,
        # with the stopped components at zero replicas.
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
        if not await self._apply_chart(step_id):
            return
        by_name = {c.name: c for c in spec.spec.components}
        for name in components:
            component = by_name[name]
            kind, workload = component.workload.kind, component.workload.resolved_name(self.name)
            replicas = await self._configured_replicas(kind, workload) if running else 0
            try:
                await self.parts.cluster.wait_scaled(
                    self.namespace, kind, workload, replicas, CHART_TIMEOUT_SECONDS
                )
            except ReplicasChanged as changed:
                raise StepFailed(await self._scaled_meanwhile(name, replicas, changed.replicas)) from None

    async def _scaled_meanwhile(self, component: str, waited_for: int, now: int) -> str:
        """The error of a stop or start whose component another change scaled while it waited."""
        later = await self.parts.cluster.styrmin_deployment_revision(self.namespace, self.name)
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
        """The replicas the chart sets for a workload (recorded by Helm in its last-applied manifest)."""
        current = await self.parts.cluster.workload(self.namespace, kind, workload)
        annotations = (current.metadata.annotations or {}) if current.metadata else {}
        return int(annotations.get(REPLICAS_ANNOTATION, "1"))


async def _nothing() -> None:
    return None


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YamlDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's safe loader and dumper when PyYAML has them (several times faster), else the pure ones."""

REPLICAS_ANNOTATION = "styrmin.io/configured-replicas"
"""Set by the agent on each component workload: its replicas as the chart renders them."""


def _keep_stopped_components_at_zero(
    chart_dir: Path, spec: DriverSpec, release: str, stopped: list[str]
) -> None:
    """Record each component's configured replicas, and keep stopped components at zero replicas."""
    workloads = {(c.workload.kind, c.workload.resolved_name(release)): c.name for c in spec.spec.components}
    for path in sorted((chart_dir / "rendered").glob("*.yaml")):
        manifest = yaml.load(path.read_text(), Loader=_YamlLoader)  # noqa: S506 (a safe loader)
        if not isinstance(manifest, dict):
            continue
        key = (manifest.get("kind"), (manifest.get("metadata") or {}).get("name"))
        component = workloads.get(key)  # type: ignore[arg-type]
        if component is None:
            continue
        body = manifest.setdefault("spec", {})
        configured = int(body.get("replicas", 1))
        annotations = manifest["metadata"].setdefault("annotations", {})
        annotations[REPLICAS_ANNOTATION] = str(configured)
        if component in stopped:
            body["replicas"] = 0
        path.write_text(yaml.dump(manifest, Dumper=_YamlDumper, sort_keys=False))
