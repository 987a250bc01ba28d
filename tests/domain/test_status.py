"""The deployment status rule and the upgrade and retry decisions, without any I/O."""

from __future__ import annotations

from styrmin_backend.domain.status import (
    ComponentState,
    DeploymentStatus,
    LatestChange,
    StatusFacts,
    UpgradeDecision,
    Versions,
    component_state,
    decide_upgrade,
    deployment_status,
    retry_refusal,
)
from styrmin_backend.domain.tasks import TaskStatus, TaskType

V3 = Versions("3.0.0", "1.0.0")
V6 = Versions("6.0.0", "1.0.0")
OK, FAILED, RUNNING, PENDING = TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.RUNNING, TaskStatus.PENDING


def facts(
    *changes: tuple[int, TaskType, TaskStatus],
    wanted: Versions = V3,
    running: Versions | None = V3,
    stopped: tuple[str, ...] = (),
) -> StatusFacts:
    latest = {
        kind: LatestChange(task_id, kind, status, "6.0.0" if kind is TaskType.UPGRADE else None)
        for task_id, kind, status in changes
    }
    return StatusFacts(wanted=wanted, running=running, stopped_components=stopped, latest=latest)


def state(f: StatusFacts) -> DeploymentStatus:
    return deployment_status(f).state


def test_a_created_deployment_runs() -> None:
    assert state(facts((1, TaskType.CREATE, OK))) is DeploymentStatus.RUNNING


def test_a_pending_or_running_change_is_deploying() -> None:
    assert state(facts((1, TaskType.CREATE, PENDING), running=None)) is DeploymentStatus.DEPLOYING
    f = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, RUNNING), wanted=V6)
    assert state(f) is DeploymentStatus.DEPLOYING
    assert "Task #2 (upgrade) is running" in deployment_status(f).reason


def test_a_failed_upgrade_stays_visible_after_a_later_start_or_stop_succeeds() -> None:
    for later in (TaskType.START, TaskType.STOP):
        f = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), (3, later, OK), wanted=V6)
        status = deployment_status(f)
        assert status.state is DeploymentStatus.UPGRADE_FAILED
        assert status.task_id == 2
        assert "upgrade to 6.0.0 failed" in status.reason and "runs application 3.0.0" in status.reason


def test_a_later_successful_upgrade_clears_the_failure() -> None:
    f = facts((1, TaskType.CREATE, OK), (4, TaskType.UPGRADE, OK), wanted=V6, running=V6)
    assert state(f) is DeploymentStatus.RUNNING


def test_a_failed_create_or_configuration_is_failed_until_one_of_its_kind_succeeds() -> None:
    assert state(facts((1, TaskType.CREATE, FAILED), running=None)) is DeploymentStatus.FAILED
    f = facts((1, TaskType.CREATE, OK), (2, TaskType.CONFIGURE, FAILED), (3, TaskType.STOP, OK))
    assert state(f) is DeploymentStatus.FAILED
    f = facts((1, TaskType.CREATE, OK), (5, TaskType.CONFIGURE, OK), stopped=("worker",))
    assert state(f) is DeploymentStatus.STOPPED


def test_stop_and_start_are_one_kind_the_later_decides() -> None:
    failed_stop_then_start = facts(
        (1, TaskType.CREATE, OK), (2, TaskType.STOP, FAILED), (3, TaskType.START, OK)
    )
    assert state(failed_stop_then_start) is DeploymentStatus.RUNNING
    failed_start = facts((1, TaskType.CREATE, OK), (2, TaskType.STOP, OK), (3, TaskType.START, FAILED))
    assert state(failed_start) is DeploymentStatus.FAILED


def test_the_most_recent_failure_decides_between_kinds() -> None:
    f = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), (3, TaskType.CONFIGURE, FAILED))
    assert state(f) is DeploymentStatus.FAILED
    f = facts((1, TaskType.CREATE, OK), (2, TaskType.CONFIGURE, FAILED), (3, TaskType.UPGRADE, FAILED))
    assert state(f) is DeploymentStatus.UPGRADE_FAILED


def test_a_failed_backup_leaves_the_deployment_running() -> None:
    assert state(facts((1, TaskType.CREATE, OK), (2, TaskType.BACKUP, FAILED))) is DeploymentStatus.RUNNING


def test_a_restore_after_a_failed_upgrade_brings_the_deployment_back_to_running() -> None:
    failed = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), (3, TaskType.RESTORE, OK))
    assert state(failed) is DeploymentStatus.RUNNING
    # A restore older than the failure does not hide it; a failed restore is a failure of its own.
    later_failure = facts((1, TaskType.CREATE, OK), (2, TaskType.RESTORE, OK), (3, TaskType.UPGRADE, FAILED))
    assert state(later_failure) is DeploymentStatus.UPGRADE_FAILED
    restore_failed = facts(
        (1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), (3, TaskType.RESTORE, FAILED)
    )
    assert state(restore_failed) is DeploymentStatus.FAILED


def test_stopped_components_show_as_stopped() -> None:
    assert state(facts((1, TaskType.CREATE, OK), (2, TaskType.STOP, OK), stopped=("worker",))) is (
        DeploymentStatus.STOPPED
    )


def test_delete_is_deleting_then_deleted_and_a_failed_delete_is_failed() -> None:
    assert state(facts((1, TaskType.CREATE, OK), (2, TaskType.DELETE, PENDING))) is DeploymentStatus.DELETING
    # A delete waits behind a running change yet the deployment already says it goes away.
    both = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, RUNNING), (3, TaskType.DELETE, PENDING))
    assert state(both) is DeploymentStatus.DELETING
    assert state(facts((1, TaskType.CREATE, OK), (2, TaskType.DELETE, OK))) is DeploymentStatus.DELETED
    assert state(facts((1, TaskType.CREATE, OK), (2, TaskType.DELETE, FAILED))) is DeploymentStatus.FAILED


def test_nothing_to_do_only_when_it_runs_the_target_and_its_last_change_succeeded() -> None:
    settled = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, OK), wanted=V6, running=V6)
    assert decide_upgrade(V6, settled) is UpgradeDecision.NOTHING_TO_DO
    assert decide_upgrade(V3, settled) is UpgradeDecision.START


def test_the_same_upgrade_after_a_failure_starts_again() -> None:
    # The migration failed after the chart went to 6.0.0: what runs is what was asked, yet it failed.
    applied = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), wanted=V6, running=V6)
    assert decide_upgrade(V6, applied) is UpgradeDecision.START
    # It failed before the chart changed: the cluster still runs 3.0.0.
    kept = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), wanted=V6, running=V3)
    assert decide_upgrade(V6, kept) is UpgradeDecision.START
    # Even after a later stop succeeded.
    later = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, FAILED), (3, TaskType.STOP, OK), wanted=V6)
    assert decide_upgrade(V6, later) is UpgradeDecision.START


def test_a_cancelled_change_shows_like_a_failed_one_until_a_later_one_succeeds() -> None:
    cancelled = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, TaskStatus.CANCELLED), wanted=V6)
    status = deployment_status(cancelled)
    assert status.state is DeploymentStatus.UPGRADE_FAILED and "was cancelled (task #2)" in status.reason
    assert decide_upgrade(V6, cancelled) is UpgradeDecision.START
    configure = facts((1, TaskType.CREATE, OK), (2, TaskType.CONFIGURE, TaskStatus.CANCELLED))
    assert deployment_status(configure).state is DeploymentStatus.FAILED


def test_the_same_upgrade_while_a_change_runs_waits() -> None:
    busy = facts((1, TaskType.CREATE, OK), (2, TaskType.UPGRADE, RUNNING), wanted=V6)
    assert decide_upgrade(V6, busy) is UpgradeDecision.WAIT


def test_only_the_latest_failed_or_cancelled_task_of_its_type_can_be_retried() -> None:
    failed = LatestChange(5, TaskType.UPGRADE, FAILED)
    assert retry_refusal(failed, failed) is None
    cancelled = LatestChange(5, TaskType.UPGRADE, TaskStatus.CANCELLED)
    assert retry_refusal(cancelled, cancelled) is None
    assert "only a failed or cancelled task" in (
        retry_refusal(LatestChange(5, TaskType.UPGRADE, OK), None) or ""
    )
    newer = LatestChange(7, TaskType.UPGRADE, RUNNING)
    refusal = retry_refusal(failed, newer) or ""
    assert "not the latest upgrade task" in refusal and "task 7" in refusal


def test_component_states() -> None:
    assert component_state(True, 1, 1) is ComponentState.STOPPED
    assert component_state(False, None, None) is ComponentState.UNREPORTED
    assert component_state(False, 2, 2) is ComponentState.READY
    assert component_state(False, 2, 1) is ComponentState.NOT_READY
    assert component_state(False, 0, 0) is ComponentState.NOT_READY
