"""A change's plan: the steps its task records, decided from the change and the driver's actions alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from styrmin_backend.domain.backups import (
    CHECK_FILES_STEP,
    DELETE_FILES_STEP,
    RECORD_FILES_STEP,
    restore_version_step,
)
from styrmin_backend.domain.hooks import MODE_ORDER, Hook, Mode, hook_has_driver_core, hook_step_name
from styrmin_backend.domain.plan import ChangeFacts, DeclaredAction, Operation, Plan, decide
from styrmin_backend.domain.steps import (
    APPLY_CONFIGURATION_STEP,
    APPLY_VERSION_STEP,
    INSTALL_STEP,
    START_STEP,
    STOP_STEP,
    UNINSTALL_STEP,
)
from styrmin_backend.domain.tasks import TaskType

HOOK_MODES = [(h, m) for h in Hook for m in MODE_ORDER if m is not Mode.CORE or hook_has_driver_core(h)]


def declared(hook: Hook, mode: Mode, name: str = "", description: str | None = None) -> DeclaredAction:
    return DeclaredAction(name or f"{hook.value}_{mode.value}", hook, mode, description)


ALL_ACTIONS = [declared(h, m) for h, m in HOOK_MODES]

# A driver's actions: any subset of the hook modes a driver may use, each with one to three actions.
driver_actions = st.lists(
    st.tuples(st.sampled_from(HOOK_MODES), st.integers(1, 3), st.none() | st.text(min_size=1, max_size=20)),
    max_size=len(HOOK_MODES),
    unique_by=lambda entry: entry[0],
).map(
    lambda entries: [
        DeclaredAction(f"{hook.value}_{mode.value}_{index}", hook, mode, description)
        for (hook, mode), count, description in entries
        for index in range(count)
    ]
)

changes = st.one_of(
    st.builds(ChangeFacts, kind=st.just(TaskType.CREATE), app_version=st.just("1.0.0")),
    st.builds(
        ChangeFacts,
        kind=st.just(TaskType.UPGRADE),
        app_version=st.sampled_from(["1.0.0", "2.0.0"]),
        driver_version=st.sampled_from(["1.0.0", "1.1.0"]),
        from_app_version=st.just("1.0.0"),
        from_driver_version=st.just("1.0.0"),
        run_hooks=st.booleans(),
    ),
    st.builds(ChangeFacts, kind=st.just(TaskType.CONFIGURE)),
    st.builds(
        ChangeFacts,
        kind=st.sampled_from([TaskType.STOP, TaskType.START]),
        components=st.lists(st.sampled_from(["server", "task-worker"]), min_size=1, unique=True).map(tuple),
    ),
    st.builds(ChangeFacts, kind=st.just(TaskType.DELETE)),
    st.builds(ChangeFacts, kind=st.just(TaskType.BACKUP)),
    st.builds(
        ChangeFacts,
        kind=st.just(TaskType.RESTORE),
        app_version=st.sampled_from(["1.0.0", "2.0.0"]),
        driver_version=st.sampled_from(["1.0.0", "1.1.0"]),
        from_app_version=st.sampled_from(["1.0.0", "2.0.0"]),
        from_driver_version=st.sampled_from(["1.0.0", "1.1.0"]),
        restores_configuration=st.booleans(),
    ),
    st.builds(ChangeFacts, kind=st.just(TaskType.DELETE_BACKUP)),
)

HOOK_OF = {
    TaskType.CREATE: Hook.SETUP,
    TaskType.UPGRADE: Hook.UPGRADE,
    TaskType.BACKUP: Hook.BACKUP,
    TaskType.RESTORE: Hook.RESTORE,
}


def names(plan: Plan) -> list[str]:
    return [step.name for step in plan]


# --- the steps of each change, as the task shows them --------------------------------------------


def test_create_runs_setup_pre_then_installs_then_setup_post() -> None:
    plan = decide(ChangeFacts(TaskType.CREATE), ALL_ACTIONS)
    assert names(plan) == [
        hook_step_name(Hook.SETUP, Mode.PRE),
        INSTALL_STEP,
        hook_step_name(Hook.SETUP, Mode.POST),
    ]
    assert [s.operation for s in plan] == [
        Operation.RUN_ACTIONS,
        Operation.APPLY_CHART,
        Operation.RUN_ACTIONS,
    ]


def test_create_without_setup_actions_only_installs() -> None:
    assert names(decide(ChangeFacts(TaskType.CREATE), [])) == [INSTALL_STEP]


def test_an_upgrade_with_core_actions_runs_them_as_the_upgrade_hook() -> None:
    plan = decide(ChangeFacts(TaskType.UPGRADE, "2.0.0", "1.0.0"), ALL_ACTIONS)
    assert names(plan) == [
        "Run the upgrade pre-hook",
        "Run the upgrade hook",
        "Run the upgrade post-hook",
    ]
    core = plan.steps[1]
    assert core.operation is Operation.RUN_ACTIONS
    assert [a.name for a in core.actions] == ["upgrade_core"]


def test_an_upgrade_without_actions_still_records_the_upgrade_hook_as_styrmins_own_upgrade() -> None:
    plan = decide(ChangeFacts(TaskType.UPGRADE, "2.0.0", "1.0.0"), [])
    assert names(plan) == ["Run the upgrade hook"]
    assert plan.steps[0].operation is Operation.APPLY_CHART
    assert "2.0.0" in plan.steps[0].description


def test_an_upgrade_an_action_requested_applies_the_chart_without_hooks() -> None:
    plan = decide(ChangeFacts(TaskType.UPGRADE, "2.0.0", "1.0.0", run_hooks=False), ALL_ACTIONS)
    assert names(plan) == [APPLY_VERSION_STEP]
    assert {(s.hook, s.mode) for s in plan.skipped} >= {(Hook.UPGRADE, m) for m in MODE_ORDER}
    assert all("without hooks" in s.reason for s in plan.skipped if s.hook is Hook.UPGRADE)


def test_configure_applies_the_configuration_and_runs_no_hook() -> None:
    plan = decide(ChangeFacts(TaskType.CONFIGURE), ALL_ACTIONS)
    assert names(plan) == [APPLY_CONFIGURATION_STEP]
    assert {(s.hook, s.mode) for s in plan.skipped} == set(HOOK_MODES)


@pytest.mark.parametrize(
    ("kind", "name", "operation"),
    [
        (TaskType.STOP, STOP_STEP, Operation.STOP_COMPONENTS),
        (TaskType.START, START_STEP, Operation.START_COMPONENTS),
    ],
)
def test_stop_and_start_scale_the_named_components(kind: TaskType, name: str, operation: Operation) -> None:
    plan = decide(ChangeFacts(kind, components=("task-worker",)), ALL_ACTIONS)
    assert names(plan) == [name]
    assert (plan.steps[0].operation, plan.steps[0].components) == (operation, ("task-worker",))


def test_delete_uninstalls() -> None:
    plan = decide(ChangeFacts(TaskType.DELETE), ALL_ACTIONS)
    assert [(s.name, s.operation) for s in plan] == [(UNINSTALL_STEP, Operation.UNINSTALL)]


def test_a_backup_runs_each_backup_mode_with_actions_then_records_the_files() -> None:
    plan = decide(
        ChangeFacts(TaskType.BACKUP), [declared(Hook.BACKUP, Mode.CORE), declared(Hook.SETUP, Mode.PRE)]
    )
    assert names(plan) == ["Run the backup hook", RECORD_FILES_STEP]
    assert plan.steps[-1].operation is Operation.RECORD_BACKUP_FILES


def test_a_restore_to_another_version_checks_the_files_brings_it_back_then_runs_the_restore_hook() -> None:
    change = ChangeFacts(
        TaskType.RESTORE, "1.0.0", "1.0.0", from_app_version="2.0.0", from_driver_version="1.0.0"
    )
    plan = decide(change, ALL_ACTIONS)
    assert names(plan) == [
        CHECK_FILES_STEP,
        restore_version_step("1.0.0"),
        "Run the restore pre-hook",
        "Run the restore hook",
        "Run the restore post-hook",
    ]
    assert plan.steps[1].operation is Operation.RESTORE_VERSION


def test_a_restore_at_the_backups_version_and_configuration_skips_bringing_it_back() -> None:
    change = ChangeFacts(
        TaskType.RESTORE, "1.0.0", "1.0.0", from_app_version="1.0.0", from_driver_version="1.0.0"
    )
    assert names(decide(change, [declared(Hook.RESTORE, Mode.CORE)])) == [
        CHECK_FILES_STEP,
        "Run the restore hook",
    ]


def test_a_restore_of_another_configuration_brings_it_back_at_the_same_version() -> None:
    change = ChangeFacts(TaskType.RESTORE, "1.0.0", "1.0.0", "1.0.0", "1.0.0", restores_configuration=True)
    assert restore_version_step("1.0.0") in names(decide(change, []))


def test_delete_backup_deletes_the_files() -> None:
    plan = decide(ChangeFacts(TaskType.DELETE_BACKUP), ALL_ACTIONS)
    assert [(s.name, s.operation) for s in plan] == [(DELETE_FILES_STEP, Operation.DELETE_BACKUP_FILES)]


def test_an_action_step_carries_its_actions_descriptions() -> None:
    actions = [
        declared(Hook.UPGRADE, Mode.CORE, "upgrade", "Stop workers, run migration, restart, verify"),
        declared(Hook.UPGRADE, Mode.CORE, "warm"),
    ]
    step = decide(ChangeFacts(TaskType.UPGRADE), actions).steps[0]
    assert step.actions == tuple(actions)
    assert "upgrade: Stop workers, run migration, restart, verify" in step.description
    assert "warm" in step.description


def test_hooks_of_other_changes_are_skipped_saying_when_they_run() -> None:
    plan = decide(ChangeFacts(TaskType.CREATE), [declared(Hook.UPGRADE, Mode.POST)])
    skipped = {(s.hook, s.mode): s.reason for s in plan.skipped}
    assert "only when a deployment moves to another" in skipped[(Hook.UPGRADE, Mode.POST)]
    assert "no setup pre action" in skipped[(Hook.SETUP, Mode.PRE)]
    assert (Hook.UPGRADE, Mode.PRE) not in skipped  # no action there, and not this change's hook


# --- the mode rules, over every change kind and driver shape --------------------------------------


@given(changes, driver_actions)
def test_each_step_of_a_mode_runs_exactly_the_actions_of_that_mode(
    change: ChangeFacts, actions: list[DeclaredAction]
) -> None:
    for step in decide(change, actions):
        if step.operation is Operation.RUN_ACTIONS:
            assert step.hook is not None and step.mode is not None
            assert step.name == hook_step_name(step.hook, step.mode)
            assert step.actions == tuple(a for a in actions if (a.hook, a.mode) == (step.hook, step.mode))
            assert step.actions, "a mode without an action records no step"
        else:
            assert step.actions == ()


@given(changes, driver_actions)
def test_modes_run_in_the_fixed_order_and_only_the_changes_own_hook(
    change: ChangeFacts, actions: list[DeclaredAction]
) -> None:
    plan = decide(change, actions)
    hooked = [s for s in plan if s.hook is not None]
    assert {s.hook for s in hooked} <= {HOOK_OF.get(change.kind)}
    modes = [MODE_ORDER.index(s.mode) for s in hooked if s.mode is not None]
    assert modes == sorted(modes) and len(set(modes)) == len(modes)
    if change.kind is TaskType.UPGRADE and not change.run_hooks:
        assert hooked == []


@given(changes, driver_actions)
def test_the_upgrade_hook_always_records_its_core_step(
    change: ChangeFacts, actions: list[DeclaredAction]
) -> None:
    plan = decide(change, actions)
    if change.kind is TaskType.UPGRADE and change.run_hooks:
        cores = [s for s in plan if s.name == "Run the upgrade hook"]
        assert len(cores) == 1
        has_core_actions = any((a.hook, a.mode) == (Hook.UPGRADE, Mode.CORE) for a in actions)
        assert cores[0].operation is (Operation.RUN_ACTIONS if has_core_actions else Operation.APPLY_CHART)


@given(changes, driver_actions)
def test_every_mode_of_the_changes_hook_either_runs_or_says_why_not(
    change: ChangeFacts, actions: list[DeclaredAction]
) -> None:
    plan = decide(change, actions)
    ran = {(s.hook, s.mode) for s in plan if s.hook is not None}
    skipped = {(s.hook, s.mode) for s in plan.skipped}
    assert not ran & skipped
    hook = HOOK_OF.get(change.kind)
    if hook is not None:
        assert {(hook, m) for m in MODE_ORDER} <= ran | skipped
    for action in actions:
        assert (action.hook, action.mode) in ran | skipped, "every declared action runs or says why not"
    assert all(s.reason for s in plan.skipped)


@given(changes, driver_actions)
def test_styrmins_own_operation_comes_once_with_the_steps_of_its_change(
    change: ChangeFacts, actions: list[DeclaredAction]
) -> None:
    own = [s.name for s in decide(change, actions) if s.operation is not Operation.RUN_ACTIONS]
    expected = {
        TaskType.CREATE: [INSTALL_STEP],
        TaskType.CONFIGURE: [APPLY_CONFIGURATION_STEP],
        TaskType.STOP: [STOP_STEP],
        TaskType.START: [START_STEP],
        TaskType.DELETE: [UNINSTALL_STEP],
        TaskType.BACKUP: [RECORD_FILES_STEP],
        TaskType.DELETE_BACKUP: [DELETE_FILES_STEP],
    }
    if change.kind in expected:
        assert own == expected[change.kind]
    elif change.kind is TaskType.RESTORE:
        assert own[0] == CHECK_FILES_STEP and len(own) in (1, 2)
    else:
        assert len(own) <= 1


def test_every_change_kind_has_a_plan() -> None:
    for kind in TaskType:
        assert len(decide(ChangeFacts(kind, components=("server",)), [])) >= 1
