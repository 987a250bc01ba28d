"""A deployment's status, decided in one place from what was asked, what runs, and its latest changes.

The rule (docs/api.md, "Deployment status"), first match wins:

1. **deleting** while its delete is pending or running; **deleted** once the delete succeeded.
2. **deploying** while any change requested of it (not one an action started: that is part of its
   parent) is pending or running.
3. **upgrade-failed** when the latest upgrade failed, **failed** when the latest change of another kind
   that alters what runs failed (create, configuration, stop/start, restore, delete). When several
   kinds failed, the most recent failure decides. A failure stays until a later change of the same kind
   succeeds (a retry, or the same request again), or until a restore succeeds after it: a restore
   brings back the version and data of its backup, so it is the way back from any failed change. A
   failed backup alters nothing and shows no failure.
4. **stopped** when one or more components are stopped.
5. **running** otherwise.

A new kind of task slots in through ``_KIND``, ``_IN_PROGRESS`` and ``_FAILED``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from styrmin_backend.domain.tasks import TaskStatus, TaskType


class DeploymentStatus(StrEnum):
    """What a deployment is doing, as every interface shows it."""

    DEPLOYING = "deploying"
    RUNNING = "running"
    UPGRADE_FAILED = "upgrade-failed"
    STOPPED = "stopped"
    FAILED = "failed"
    DELETING = "deleting"
    DELETED = "deleted"


@dataclass(frozen=True)
class Versions:
    """An application version and a driver version, as asked for or as the cluster runs them."""

    app: str
    driver: str


@dataclass(frozen=True)
class LatestChange:
    """The latest task of one type that a deployment's user (not an action) requested."""

    task_id: int
    type: TaskType
    status: TaskStatus
    to_app_version: str | None = None
    """For an upgrade: the application version it went to."""


@dataclass(frozen=True)
class StatusFacts:
    """Everything the status is decided from."""

    wanted: Versions
    running: Versions | None
    """None until a change applied the chart."""
    stopped_components: tuple[str, ...]
    latest: Mapping[TaskType, LatestChange]
    """The latest requested task of each type."""


@dataclass(frozen=True)
class Status:
    """A deployment's status, the sentence explaining it, and the task that decided it (if any)."""

    state: DeploymentStatus
    reason: str
    task_id: int | None = None


# Stop and start change the same thing (which components run): the later of the two decides.
_KIND: Mapping[TaskType, str] = {TaskType.STOP: "components", TaskType.START: "components"}

_IN_PROGRESS: Mapping[TaskType, DeploymentStatus] = {TaskType.DELETE: DeploymentStatus.DELETING}
"""The state shown while a change of a type runs; deploying unless named here."""

_FAILED: Mapping[TaskType, DeploymentStatus | None] = {
    TaskType.UPGRADE: DeploymentStatus.UPGRADE_FAILED,
    TaskType.BACKUP: None,
    TaskType.DELETE_BACKUP: None,
}
"""The state a failed change of a type leaves; failed unless named here (None: no failure shown)."""


def deployment_status(facts: StatusFacts) -> Status:
    """The deployment's status by the rule of this module."""
    latest = _latest_of_each_kind(facts.latest)
    delete = facts.latest.get(TaskType.DELETE)
    if delete is not None and delete.status is TaskStatus.SUCCEEDED:
        return Status(DeploymentStatus.DELETED, "The deployment was deleted.", delete.task_id)
    busy = sorted((c for c in latest if not c.status.ended), key=lambda c: c.task_id)
    if busy:
        change = busy[-1] if delete is None or delete.status.ended else delete
        doing = "running" if change.status is TaskStatus.RUNNING else "waiting for an agent"
        return Status(
            _IN_PROGRESS.get(change.type, DeploymentStatus.DEPLOYING),
            f"Task #{change.task_id} ({change.type.value}) is {doing}.",
            change.task_id,
        )
    restore = facts.latest.get(TaskType.RESTORE)
    restored_after = restore.task_id if restore is not None and restore.status is TaskStatus.SUCCEEDED else 0
    failures = [
        (c, state)
        for c in latest
        if c.status.unsuccessful
        and c.task_id > restored_after
        and (state := _FAILED.get(c.type, DeploymentStatus.FAILED)) is not None
    ]
    if failures:
        change, state = max(failures, key=lambda pair: pair[0].task_id)
        return Status(state, _failure_reason(change, facts), change.task_id)
    if facts.stopped_components:
        stopped = ", ".join(facts.stopped_components)
        return Status(DeploymentStatus.STOPPED, f"Stopped components: {stopped}.")
    return Status(DeploymentStatus.RUNNING, f"Runs {_runs(facts)}.")


def _latest_of_each_kind(latest: Mapping[TaskType, LatestChange]) -> list[LatestChange]:
    kinds: dict[str, LatestChange] = {}
    for change in latest.values():
        kind = _KIND.get(change.type, change.type.value)
        if kind not in kinds or kinds[kind].task_id < change.task_id:
            kinds[kind] = change
    return list(kinds.values())


def _runs(facts: StatusFacts) -> str:
    running = facts.running or facts.wanted
    return f"application {running.app} with driver version {running.driver}"


def _failure_reason(change: LatestChange, facts: StatusFacts) -> str:
    ended = "was cancelled" if change.status is TaskStatus.CANCELLED else "failed"
    if change.type is TaskType.UPGRADE:
        wanted = change.to_app_version or facts.wanted.app
        runs = f"the cluster runs {_runs(facts)}" if facts.running else "nothing was applied"
        return (
            f"The upgrade to {wanted} {ended} (task #{change.task_id}); {runs}. "
            "Retry the task or request the upgrade again."
        )
    return f"The {change.type.value} change {ended} (task #{change.task_id}). Retry the task or request it again."


class UpgradeDecision(StrEnum):
    """What a user's request for an upgrade to some versions leads to."""

    NOTHING_TO_DO = "nothing-to-do"
    START = "start"
    WAIT = "wait"
    """A change to the same versions is still pending or running."""


def decide_upgrade(target: Versions, facts: StatusFacts) -> UpgradeDecision:
    """Whether an upgrade to ``target`` starts a task.

    Nothing to do only when the deployment already runs ``target``, it is what was asked, and the last
    change to it succeeded (status running or stopped); a failed change is started again.
    """
    status = deployment_status(facts)
    if target == facts.wanted and status.state in (DeploymentStatus.DEPLOYING, DeploymentStatus.DELETING):
        return UpgradeDecision.WAIT
    settled = status.state in (DeploymentStatus.RUNNING, DeploymentStatus.STOPPED)
    if target == facts.wanted == facts.running and settled:
        return UpgradeDecision.NOTHING_TO_DO
    return UpgradeDecision.START


def retry_refusal(task: LatestChange, latest: LatestChange | None) -> str | None:
    """Why ``task`` cannot be retried (None when it can): only the latest failed or cancelled task of its
    type may be.

    ``latest`` is the latest requested task of the same type for the same deployment.
    """
    if not task.status.unsuccessful:
        return f"Task {task.task_id} is {task.status.value}; only a failed or cancelled task can be retried."
    if latest is not None and latest.task_id != task.task_id:
        return (
            f"Task {task.task_id} is not the latest {task.type.value} task of its deployment (task "
            f"{latest.task_id} is); retry that one, or request the change again."
        )
    return None


class ComponentState(StrEnum):
    """What a component's workload is doing, as the agent last saw it."""

    READY = "ready"
    NOT_READY = "not-ready"
    STOPPED = "stopped"
    UNREPORTED = "unreported"


def component_state(stopped: bool, replicas: int | None, ready_replicas: int | None) -> ComponentState:
    """Stopped when asked to be; ready when every replica the agent saw is ready; unreported before it saw any."""
    if stopped:
        return ComponentState.STOPPED
    if replicas is None or ready_replicas is None:
        return ComponentState.UNREPORTED
    if replicas > 0 and ready_replicas >= replicas:
        return ComponentState.READY
    return ComponentState.NOT_READY
