"""A change's plan: the ordered steps its task will record, decided before anything runs.

:func:`decide` is pure: from what matters of a claimed change (:class:`ChangeFacts`) and the actions
its driver declares (:class:`DeclaredAction`) it returns the steps in order, each with the operation
the agent carries out for it, and the hook modes that will not run, with the reason. The agent runs
the plan step by step; a preview shows it without running anything.

The seed's mode rules live here: the order across modes is fixed (pre, core, post); a mode without an
action records no step; the upgrade hook's core always runs, as its core actions when the driver
declares some and as Styrmin's own chart upgrade otherwise; the setup hook's core is Styrmin's
install.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from styrmin_backend.domain import steps
from styrmin_backend.domain.backups import (
    CHECK_FILES_STEP,
    DELETE_FILES_STEP,
    RECORD_FILES_STEP,
    restore_version_step,
)
from styrmin_backend.domain.hooks import MODE_ORDER, Hook, Mode, hook_step_name
from styrmin_backend.domain.tasks import TaskType


class Operation(StrEnum):
    """What the agent does for a planned step."""

    RUN_ACTIONS = "run-actions"
    """Run the step's actions (one hook mode) as Prefect flow runs, concurrently; wait for all."""
    APPLY_CHART = "apply-chart"
    """Write the StyrminDeployment, then render and apply the chart (Helm install or upgrade)."""
    STOP_COMPONENTS = "stop-components"
    """Apply the chart with the components at zero replicas; wait until they are there."""
    START_COMPONENTS = "start-components"
    """Apply the chart with the components at their configured replicas; wait until they are there."""
    UNINSTALL = "uninstall"
    """Uninstall the Helm release and remove the StyrminDeployment."""
    CHECK_BACKUP_FILES = "check-backup-files"
    """Fetch a backup's files and check each one's size and sha256 against the record."""
    RESTORE_VERSION = "restore-version"
    """Bring the application back to the backup's versions and configuration (a linked upgrade task)."""
    RECORD_BACKUP_FILES = "record-backup-files"
    """Record (and, for a bucket, upload) each file the backup hook's actions wrote."""
    DELETE_BACKUP_FILES = "delete-backup-files"
    """Remove a backup's files from the storage location they were written to."""


HELM_OPERATIONS = frozenset(
    {Operation.APPLY_CHART, Operation.STOP_COMPONENTS, Operation.START_COMPONENTS, Operation.UNINSTALL}
)
"""The operations that write the deployment's Helm release, each under its Helm lock. A task whose
plan begins with one gets the lock with its claim, when it is free: its first call is that write."""


@dataclass(frozen=True)
class DeclaredAction:
    """An action as the driver declares it: what a plan needs of ``spec.actions[]``."""

    name: str
    hook: Hook
    mode: Mode
    description: str | None = None


@dataclass(frozen=True)
class ChangeFacts:
    """What matters of a change to plan it: its kind, and what decides its steps.

    ``app_version`` is the version the change moves the deployment to; for a restore, the backup's.
    """

    kind: TaskType
    app_version: str = ""
    driver_version: str = ""
    from_app_version: str | None = None
    """The application version before the change (an upgrade's or a restore's)."""
    from_driver_version: str | None = None
    run_hooks: bool = True
    """False for an upgrade an action requested: the target is applied through Helm only."""
    components: tuple[str, ...] = ()
    """The components a stop or start scales."""
    restores_configuration: bool = False
    """Whether a restore brings back a configuration that differs from the deployment's."""


@dataclass(frozen=True)
class PlannedStep:
    """One step the task will record, in order, and what the agent does for it."""

    name: str
    operation: Operation
    description: str
    hook: Hook | None = None
    mode: Mode | None = None
    actions: tuple[DeclaredAction, ...] = ()
    """The actions the step runs (all of one hook mode); empty for Styrmin's own operations."""
    components: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkippedMode:
    """A hook mode that will not run for this change, and why."""

    hook: Hook
    mode: Mode
    reason: str


@dataclass(frozen=True)
class Plan:
    """The steps a change's task will record, in order, and the hook modes that will not run."""

    steps: tuple[PlannedStep, ...]
    skipped: tuple[SkippedMode, ...] = field(default=())

    def __iter__(self) -> Iterator[PlannedStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def step_names(self) -> list[str]:
        """The names of the steps, as the task will show them."""
        return [step.name for step in self.steps]


PLAN_VERSION = 1
"""How :func:`decide` names and orders steps, as a number: bump it whenever a step's name or place
changes. A server starts a claimed task's first step itself only for an agent of the same number (see
``protocol.FIRST_STEP_AT_CLAIM``), so the two never disagree on what that step is."""


class UnplannableChange(ValueError):
    """A change of a kind that no plan covers (a newer server than this agent)."""


_HOOK_OF: dict[TaskType, Hook] = {
    TaskType.CREATE: Hook.SETUP,
    TaskType.UPGRADE: Hook.UPGRADE,
    TaskType.BACKUP: Hook.BACKUP,
    TaskType.RESTORE: Hook.RESTORE,
}
_WHEN_HOOK_RUNS: dict[Hook, str] = {
    Hook.SETUP: "the setup hook runs only when a deployment is created",
    Hook.UPGRADE: "the upgrade hook runs only when a deployment moves to another application or driver "
    "version",
    Hook.BACKUP: "the backup hook runs only when a backup is taken",
    Hook.RESTORE: "the restore hook runs only when a backup is restored",
}


def decide(change: ChangeFacts, actions: Iterable[DeclaredAction]) -> Plan:
    """The plan of ``change``, given the actions its driver (at the target driver version) declares.

    Raises:
        UnplannableChange: if ``change.kind`` is one no plan covers.
    """
    declared = tuple(actions)
    kind = change.kind
    planned: list[PlannedStep]
    if kind is TaskType.CREATE:
        planned = [
            *_mode_step(declared, Hook.SETUP, Mode.PRE),
            PlannedStep(
                steps.INSTALL_STEP,
                Operation.APPLY_CHART,
                "Styrmin's own Helm install of the chart, waiting until the components are ready "
                "(the setup hook's core).",
                hook=Hook.SETUP,
                mode=Mode.CORE,
            ),
            *_mode_step(declared, Hook.SETUP, Mode.POST),
        ]
    elif kind is TaskType.UPGRADE and change.run_hooks:
        core = _of(declared, Hook.UPGRADE, Mode.CORE)
        planned = [
            *_mode_step(declared, Hook.UPGRADE, Mode.PRE),
            _actions_step(Hook.UPGRADE, Mode.CORE, core)
            if core
            else PlannedStep(
                hook_step_name(Hook.UPGRADE, Mode.CORE),
                Operation.APPLY_CHART,
                f"Styrmin's own Helm upgrade to application version {change.app_version}, driver "
                f"{change.driver_version} (the driver declares no core action of the upgrade hook).",
                hook=Hook.UPGRADE,
                mode=Mode.CORE,
            ),
            *_mode_step(declared, Hook.UPGRADE, Mode.POST),
        ]
    elif kind is TaskType.UPGRADE:
        planned = [
            PlannedStep(
                steps.APPLY_VERSION_STEP,
                Operation.APPLY_CHART,
                f"Styrmin's own Helm upgrade to application version {change.app_version}, driver "
                f"{change.driver_version}, without hooks (an action requested it).",
            )
        ]
    elif kind is TaskType.CONFIGURE:
        planned = [
            PlannedStep(
                steps.APPLY_CONFIGURATION_STEP,
                Operation.APPLY_CHART,
                "Styrmin's own Helm upgrade with the new configuration; no hook runs.",
            )
        ]
    elif kind is TaskType.STOP or kind is TaskType.START:
        stop = kind is TaskType.STOP
        names = ", ".join(change.components)
        planned = [
            PlannedStep(
                steps.STOP_STEP if stop else steps.START_STEP,
                Operation.STOP_COMPONENTS if stop else Operation.START_COMPONENTS,
                f"Apply the chart with {names} at "
                f"{'zero replicas' if stop else 'their configured replicas'}, and wait until they are there.",
                components=change.components,
            )
        ]
    elif kind is TaskType.DELETE:
        planned = [
            PlannedStep(
                steps.UNINSTALL_STEP,
                Operation.UNINSTALL,
                "Uninstall the Helm release and remove the StyrminDeployment.",
            )
        ]
    elif kind is TaskType.BACKUP:
        planned = [
            *_hook_steps(declared, Hook.BACKUP),
            PlannedStep(
                RECORD_FILES_STEP,
                Operation.RECORD_BACKUP_FILES,
                "Record the name, size and sha256 of each file the backup hook's actions wrote "
                "(and upload them to a bucket).",
            ),
        ]
    elif kind is TaskType.RESTORE:
        planned = [
            PlannedStep(
                CHECK_FILES_STEP,
                Operation.CHECK_BACKUP_FILES,
                "Check that every file the backup recorded is there, with its size and sha256.",
            )
        ]
        if restore_brings_version_back(change):
            planned.append(
                PlannedStep(
                    restore_version_step(change.app_version),
                    Operation.RESTORE_VERSION,
                    f"Upgrade to the backup's application version {change.app_version}, driver "
                    f"{change.driver_version} and configuration, through Helm only (a linked task).",
                )
            )
        planned += _hook_steps(declared, Hook.RESTORE)
    elif kind is TaskType.DELETE_BACKUP:
        planned = [
            PlannedStep(
                DELETE_FILES_STEP,
                Operation.DELETE_BACKUP_FILES,
                "Delete the backup's files from the storage location they were written to.",
            )
        ]
    else:  # pragma: no cover - every TaskType is planned above
        raise UnplannableChange(f"No plan covers {kind} changes yet.")
    return Plan(tuple(planned), _skipped(change, declared, planned))


def restore_brings_version_back(change: ChangeFacts) -> bool:
    """Whether a restore first brings back the backup's versions or configuration (a linked upgrade)."""
    running = (change.from_app_version, change.from_driver_version)
    return running != (change.app_version, change.driver_version) or change.restores_configuration


def _of(declared: Sequence[DeclaredAction], hook: Hook, mode: Mode) -> tuple[DeclaredAction, ...]:
    return tuple(a for a in declared if a.hook is hook and a.mode is mode)


def _actions_step(hook: Hook, mode: Mode, actions: tuple[DeclaredAction, ...]) -> PlannedStep:
    described = "; ".join(f"{a.name}: {a.description}" if a.description else a.name for a in actions)
    return PlannedStep(
        hook_step_name(hook, mode),
        Operation.RUN_ACTIONS,
        f"Run the driver's {hook.value} {mode.value} action(s), concurrently: {described}.",
        hook=hook,
        mode=mode,
        actions=actions,
    )


def _mode_step(declared: Sequence[DeclaredAction], hook: Hook, mode: Mode) -> list[PlannedStep]:
    """The step of one hook mode: none when the mode has no action."""
    actions = _of(declared, hook, mode)
    return [_actions_step(hook, mode, actions)] if actions else []


def _hook_steps(declared: Sequence[DeclaredAction], hook: Hook) -> list[PlannedStep]:
    """One step per mode of ``hook`` that has actions, in the fixed order."""
    return [step for mode in MODE_ORDER for step in _mode_step(declared, hook, mode)]


def _skipped(
    change: ChangeFacts, declared: Sequence[DeclaredAction], planned: Sequence[PlannedStep]
) -> tuple[SkippedMode, ...]:
    """Every hook mode that runs no action for this change: of the change's own hook, and of the
    others that the driver declares actions for."""
    running = {(s.hook, s.mode) for s in planned if s.hook is not None}
    own = _HOOK_OF.get(change.kind)
    skipped: list[SkippedMode] = []
    for hook in Hook:
        for mode in MODE_ORDER:
            if (hook, mode) in running:
                continue
            has_actions = bool(_of(declared, hook, mode))
            if hook is own and change.kind is TaskType.UPGRADE and not change.run_hooks:
                reason = "an action requested this upgrade: it is applied through Helm only, without hooks"
            elif hook is own:
                reason = f"the driver declares no {hook.value} {mode.value} action, so it records no step"
            elif has_actions:
                reason = _WHEN_HOOK_RUNS[hook]
            else:
                continue
            skipped.append(SkippedMode(hook, mode, reason))
    return tuple(skipped)
