"""Each change's workflow, run by the agent's executor on in-memory fakes of its ports (milliseconds).

What the whole stack adds (Prefect flow runs, Helm on the local cluster, the server's records) is
checked by the acceptance tests in test_workflows.py; these check every change kind's steps, errors,
notes and result as the task would show them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import replace
from typing import Any

import pytest
import yaml

from styrmin_backend.agent.backups import CREDENTIALS_SECRET, NO_BACKUP_STORAGE_ERROR
from styrmin_backend.agent.fakes import (
    FakeCluster,
    FakeHelm,
    FakePorts,
    FakePrefectHealth,
    FakeStep,
    FakeStyrminServer,
)
from styrmin_backend.agent.ports import LinkedTask, WorkloadKey, WorkloadView
from styrmin_backend.agent.reconciliation import COMPONENT_READS_AT_ONCE, Reconciliation
from styrmin_backend.agent.server_api import ServerError
from styrmin_backend.domain.backups import (
    CHECK_FILES_STEP,
    DELETE_FILES_STEP,
    RECORD_FILES_STEP,
    restore_version_step,
)
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.steps import (
    APPLY_CONFIGURATION_STEP,
    APPLY_VERSION_STEP,
    INSTALL_STEP,
    START_STEP,
    STOP_STEP,
    UNINSTALL_STEP,
)
from styrmin_backend.drivers import RenderError, load_driver_spec
from styrmin_backend.protocol import Claim, ClaimedStep, ComponentStatus, TaskResult
from tests.support.drivers import EXAMPLE_DRIVER

TOKEN = "actions-token-0123456789abcdef"
NAME = "shop-a"
TASK = 7
UPGRADE_HOOK = hook_step_name(Hook.UPGRADE, Mode.CORE)


def action(name: str, hook: str, mode: str, function: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "hook": hook, "mode": mode, "location": f"actions.py::{function or name}", **extra}


def fakes(*actions: dict[str, Any], more: dict[str, list[dict[str, Any]]] | None = None) -> FakePorts:
    """Fakes with the example driver at 1.0.0 declaring ``actions`` (and at the versions of ``more``)."""
    made = FakePorts()
    for at, declared in {"1.0.0": list(actions), **(more or {})}.items():
        spec = yaml.safe_load((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
        spec["metadata"]["version"] = at
        spec["spec"]["actions"] = declared
        made.drivers.add(load_driver_spec(yaml.safe_dump(spec)))
    return made


def claim(
    kind: str,
    *,
    revision: int = 2,
    driver_version: str = "1.0.0",
    app_version: str = "1.0.0",
    stopped: list[str] | None = None,
    values: dict[str, Any] | None = None,
    **change: Any,
) -> Claim:
    target = {
        "driver_version": driver_version,
        "app_version": app_version,
        "current_app_version": None if kind == "create" else "1.0.0",
        "configuration": {"values": values or {}},
        "stopped_components": stopped or [],
    }
    return Claim.model_validate(
        {
            "task": {"id": TASK, "revision": revision},
            "change_type": kind,
            "change": {"type": kind, "target": target, **change},
            "deployment": {"id": 3, "name": NAME, "namespace": NAME, "cluster": "local", "driver": "shop"},
            "actions_token": TOKEN,
            "styrmin_url": "http://styrmin.fake",
        }
    )


def upgrade(**extra: Any) -> Claim:
    return claim("upgrade", from_app_version="1.0.0", from_driver_version="1.0.0", **extra)


async def run(ports: FakePorts, claimed: Claim) -> list[FakeStep]:
    await Reconciliation(ports.ports, claimed).run()
    return ports.server.steps_of(claimed.task_id)


def names(steps: list[FakeStep]) -> list[str]:
    return [s.name for s in steps]


async def installed(ports: FakePorts, **extra: Any) -> None:
    """The deployment as a create left it (revision 1), the fakes' records then cleared."""
    await run(ports, claim("create", revision=1, **extra))
    ports.server.steps.clear()
    ports.server.ends.clear()
    ports.helm.applied.clear()
    ports.runner.runs.clear()


# --- create -------------------------------------------------------------------------------------


async def test_create_runs_setup_pre_install_post_and_reports_the_components() -> None:
    ports = fakes(action("pre", "setup", "pre", "announce"), action("post", "setup", "post", "checks_token"))
    steps = await run(ports, claim("create", revision=1))
    assert names(steps) == [
        hook_step_name(Hook.SETUP, Mode.PRE),
        INSTALL_STEP,
        hook_step_name(Hook.SETUP, Mode.POST),
    ]
    assert [s.status for s in steps] == ["succeeded"] * 3
    assert steps[0].flow_run_id and steps[2].flow_run_id
    assert ports.runner.ran == ["announce", "checks_token"]
    end = ports.server.ends[TASK]
    assert end.status == "succeeded" and end.result is not None and end.result.applied is not None
    assert (end.result.applied.app_version, end.result.applied.driver_version) == ("1.0.0", "1.0.0")
    seen = {c.name: c for c in end.components or []}
    assert (seen["server"].replicas, seen["server"].ready_replicas) == (1, 1)
    assert ports.cluster.styrmin_deployments[(NAME, NAME)]["revision"] == 1
    assert [a.is_upgrade for a in ports.helm.applied] == [False]


class FakeClusterCountingReads(FakeCluster):
    """The fake cluster, whose workload reads each take a moment, counting how many were in flight at
    once, and its listings; with ``labelled`` False, its workloads lack the deployment label (applied
    before the agent labelled them), so a listing finds none of them."""

    def __init__(self, *, labelled: bool = True) -> None:
        super().__init__()
        self.labelled = labelled
        self.reading = 0
        self.reads = 0
        self.most_at_once = 0
        self.listings: list[tuple[str, str, tuple[str, ...]]] = []

    async def deployment_workloads(
        self, namespace: str, deployment: str, kinds: Collection[str]
    ) -> dict[WorkloadKey, WorkloadView]:
        self.listings.append((namespace, deployment, tuple(kinds)))
        found = await super().deployment_workloads(namespace, deployment, kinds)
        return found if self.labelled else {}

    async def workload(self, namespace: str, kind: str, name: str) -> WorkloadView:
        self.reading += 1
        self.reads += 1
        self.most_at_once = max(self.most_at_once, self.reading)
        try:
            await asyncio.sleep(0.01)
            return await super().workload(namespace, kind, name)
        finally:
            self.reading -= 1


def many_components_driver(ports: FakePorts, extra: list[str]) -> None:
    spec = yaml.safe_load((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
    spec["spec"]["components"] += [
        {"name": name, "workload": {"kind": "Deployment", "name": f"{{{{ .Release.Name }}}}-{name}"}}
        for name in extra
    ]
    spec["spec"]["actions"] = []
    ports.drivers.add(load_driver_spec(yaml.safe_dump(spec)))


async def _create_with_many_components(cluster: FakeClusterCountingReads) -> list[ComponentStatus]:
    """A create of a driver of 14 components on ``cluster``; the components its end reported, which
    are each of them, in the driver's order."""
    ports = FakePorts(cluster=cluster)
    extra = [f"worker-{n}" for n in range(12)]
    many_components_driver(ports, extra)
    await run(ports, claim("create", revision=1))
    end = ports.server.ends[TASK]
    assert end.status == "succeeded"
    assert [c.name for c in end.components or []] == ["server", "task-worker", *extra]
    return list(end.components or [])


async def test_a_task_end_lists_the_deployments_workloads_once_per_kind_instead_of_reading_each() -> None:
    cluster = FakeClusterCountingReads()
    await _create_with_many_components(cluster)
    assert cluster.listings == [(NAME, NAME, ("Deployment",))]
    assert cluster.reads == 0


async def test_a_driver_of_many_components_gets_each_reported_in_order_read_a_few_at_a_time() -> None:
    # Workloads applied before the agent labelled them are not listed: each is read.
    cluster = FakeClusterCountingReads(labelled=False)
    components = await _create_with_many_components(cluster)
    assert components[-1].workload == f"{NAME}-worker-11"
    # Side by side, not one round trip per component; and never more at once than the bound.
    assert cluster.most_at_once == COMPONENT_READS_AT_ONCE


class StepEndsCounted(FakeStyrminServer):
    """The fake server, counting the steps ended by a call of their own; ``combined`` False refuses
    the task end's components and last step with a 422, as a server older than them does."""

    def __init__(self, combined: bool = True) -> None:
        super().__init__()
        self.combined = combined
        self.ended_apart: list[int] = []

    async def end_step(self, step_id: int, error: str | None) -> None:
        self.ended_apart.append(step_id)
        await super().end_step(step_id, error)

    async def end_task(
        self,
        task_id: int,
        error: str | None,
        result: TaskResult | None,
        components: list[ComponentStatus] | None = None,
        last_step_id: int | None = None,
        release_helm_locks: bool = False,
    ) -> None:
        if not self.combined and (components is not None or last_step_id is not None or release_helm_locks):
            raise ServerError("422: extra fields not permitted", status_code=422)
        await super().end_task(task_id, error, result, components, last_step_id, release_helm_locks)


class FakeHelmLeavingLocksToTheEnd(FakeHelm):
    """The fake Helm port, as the locking wrapper is after a Helm operation the task ends right after:
    its lock can be left to the task's end; records each ``settled`` call's ``with_end``."""

    def __init__(self, helm: FakeHelm) -> None:
        super().__init__(helm.cluster, helm.replicas)
        self.settled_with_end: list[bool] = []

    async def settled(self, *, with_end: bool = False) -> bool:
        self.settled_with_end.append(with_end)
        return with_end


async def test_a_tasks_end_lets_go_of_the_helm_locks_left_to_it() -> None:
    ports = fakes()
    ports.server = StepEndsCounted()
    ports.helm = helm = FakeHelmLeavingLocksToTheEnd(ports.helm)
    await run(ports, claim("create", revision=1))
    assert ports.server.ends[TASK].released_helm_locks is True and helm.settled_with_end == [True]


async def test_a_server_older_than_release_helm_locks_gets_the_locks_let_go_of_by_calls() -> None:
    ports = fakes()
    ports.server = StepEndsCounted(combined=False)
    ports.helm = helm = FakeHelmLeavingLocksToTheEnd(ports.helm)
    await run(ports, claim("create", revision=1))
    assert ports.server.ends[TASK].status == "succeeded"
    assert ports.server.ends[TASK].released_helm_locks is False and helm.settled_with_end == [True, False]


async def test_a_task_that_succeeds_ends_its_last_step_with_its_own_end() -> None:
    ports = fakes(action("pre", "setup", "pre", "announce"), action("post", "setup", "post", "announce"))
    ports.server = StepEndsCounted()
    steps = await run(ports, claim("create", revision=1))
    assert [s.status for s in steps] == ["succeeded"] * 3
    assert ports.server.ended_apart == [steps[0].id, steps[1].id]  # the last one came with the task's end
    assert ports.server.ends[TASK].status == "succeeded" and ports.server.ends[TASK].components


async def test_a_server_older_than_the_combined_end_gets_the_step_end_and_components_apart() -> None:
    ports = fakes()
    ports.server = StepEndsCounted(combined=False)
    steps = await run(ports, claim("create", revision=1))
    assert [s.status for s in steps] == ["succeeded"] and ports.server.ended_apart == [steps[0].id]
    assert ports.server.ends[TASK].status == "succeeded"
    assert [name for name, _ in ports.server.reported] == [NAME]


def with_first_step(claimed: Claim, step_id: int, name: str) -> Claim:
    """``claimed`` as a server answers it that started the first step ``name`` with the claim."""
    return claimed.model_copy(update={"first_step": ClaimedStep(id=step_id, name=name)})


async def test_the_step_the_server_started_with_the_claim_is_the_tasks_first_step() -> None:
    ports = fakes(action("pre", "setup", "pre", "announce"), action("post", "setup", "post", "announce"))
    pre = hook_step_name(Hook.SETUP, Mode.PRE)
    first = await ports.server.add_step(TASK, pre)
    steps = await run(ports, with_first_step(claim("create", revision=1), first, pre))
    assert names(steps) == [pre, INSTALL_STEP, hook_step_name(Hook.SETUP, Mode.POST)]
    assert steps[0].id == first and [s.status for s in steps] == ["succeeded"] * 3
    assert steps[0].flow_run_id and ports.runner.ran == ["announce", "announce"]


async def test_a_step_started_with_the_claim_unlike_the_agents_plan_ends_failed_saying_so() -> None:
    ports = fakes()
    first = await ports.server.add_step(TASK, "Some other step")
    steps = await run(ports, with_first_step(claim("create", revision=1), first, "Some other step"))
    assert names(steps) == ["Some other step", INSTALL_STEP]
    assert steps[0].status == "failed" and "the agent's plan starts with 'Install" in (steps[0].error or "")
    assert steps[1].status == "succeeded"


async def test_a_task_failing_before_its_first_step_ends_the_step_started_with_the_claim() -> None:
    ports = fakes()
    first = await ports.server.add_step(TASK, INSTALL_STEP)
    steps = await run(
        ports, with_first_step(claim("create", revision=1, driver_version="9.9.9"), first, INSTALL_STEP)
    )
    assert [s.id for s in steps] == [first] and steps[0].status == "failed"
    assert ports.server.ends[TASK].status == "failed" and "9.9.9" in (ports.server.ends[TASK].error or "")


async def test_a_failed_step_after_a_succeeded_one_ends_both_as_they_ended() -> None:
    ports = fakes(action("pre", "setup", "pre", "announce"), action("post", "setup", "post", "fails"))
    ports.server = StepEndsCounted()
    ports.runner.fail("fails", "Cache warm-up failed")
    steps = await run(ports, claim("create", revision=1))
    assert [s.status for s in steps] == ["succeeded", "succeeded", "failed"]
    assert ports.server.ended_apart == [s.id for s in steps]
    assert ports.server.ends[TASK].status == "failed"


async def test_an_action_gets_the_reconciliations_token_and_its_hooks_context() -> None:
    ports = fakes(action("post", "setup", "post", "announce"))
    await run(ports, claim("create", revision=1))
    (ran,) = ports.runner.runs
    assert ran.env["STYRMIN_TOKEN"] == TOKEN and ran.env["STYRMIN_URL"] == "http://styrmin.fake"
    context = ran.parameters["context"]
    assert (context["hook"], context["mode"], context["deployment_name"]) == ("setup", "post", NAME)
    assert context["hook_step_id"] == ports.server.steps[-1].id
    assert ran.flow_run_name == f"{NAME}-r1-post"
    assert set(ran.tags) == {f"deployment:{NAME}", "hook:setup", "mode:post"}


async def test_a_create_without_setup_actions_only_installs() -> None:
    ports = fakes()
    assert names(await run(ports, claim("create", revision=1))) == [INSTALL_STEP]


async def test_several_actions_of_one_mode_each_note_their_flow_run() -> None:
    ports = fakes(action("one", "setup", "post", "announce"), action("two", "setup", "post", "checks_token"))
    steps = await run(ports, claim("create", revision=1))
    assert sorted(ports.runner.ran) == ["announce", "checks_token"]
    assert steps[-1].flow_run_id is None
    assert sorted(steps[-1].notes) == [
        "Action one runs as flow run flow-run-1.",
        "Action two runs as flow run flow-run-2.",
    ]


async def test_a_failing_action_fails_its_step_and_the_task_with_the_actions_error() -> None:
    ports = fakes(action("post", "setup", "post", "fails"))
    ports.runner.fail("fails", f"Migration 0042 failed: table users is locked (token {TOKEN})")
    steps = await run(ports, claim("create", revision=1))
    assert [s.status for s in steps] == ["succeeded", "failed"]
    assert steps[-1].error is not None and "Action post failed: Migration 0042 failed" in steps[-1].error
    assert TOKEN not in steps[-1].error and "<redacted>" in steps[-1].error
    assert ports.server.ends[TASK].error == steps[-1].error


async def test_a_chart_that_does_not_render_fails_the_install_step() -> None:
    ports = fakes()
    ports.helm.render_error = RenderError("the chart rendered no Deployment")
    steps = await run(ports, claim("create", revision=1))
    assert [(s.name, s.status) for s in steps] == [(INSTALL_STEP, "failed")]
    assert steps[0].error == "Install the application failed: RenderError: the chart rendered no Deployment"
    assert ports.helm.applied == []


async def test_a_release_left_pending_notes_what_was_undone_first() -> None:
    ports = fakes()
    ports.helm.recovered = "Rolled back release shop-a, left pending by an agent that stopped."
    steps = await run(ports, claim("create", revision=1))
    assert steps[0].notes == ["Rolled back release shop-a, left pending by an agent that stopped."]


async def test_actions_do_not_start_while_the_prefect_server_is_away() -> None:
    ports = fakes(action("post", "setup", "post", "announce"))
    ports.prefect = FakePrefectHealth()
    ports.prefect.go_away()
    steps = await run(ports, claim("create", revision=1))
    assert (
        steps[-1].error
        == "The Prefect server at http://prefect.fake/api is unreachable (connection refused)."
    )
    assert ports.runner.runs == []


# --- upgrade --------------------------------------------------------------------------------------


async def test_an_upgrade_without_actions_records_the_upgrade_hook_as_styrmins_own_upgrade() -> None:
    ports = fakes()
    await installed(ports)
    steps = await run(ports, upgrade(app_version="2.0.0"))
    assert names(steps) == [UPGRADE_HOOK]
    assert [(a.app_version, a.is_upgrade) for a in ports.helm.applied] == [("2.0.0", True)]
    result = ports.server.ends[TASK].result
    assert result is not None and result.applied is not None and result.applied.app_version == "2.0.0"
    seen = {c.name: c for c in ports.server.ends[TASK].components or []}
    assert seen["server"].images == ["example.com/server:2.0.0"]


async def test_an_upgrade_with_a_core_action_runs_it_instead_of_styrmins_upgrade() -> None:
    ports = fakes(more={"1.1.0": [action("upgrade", "upgrade", "core", "announce")]})
    await installed(ports)
    steps = await run(ports, upgrade(driver_version="1.1.0"))
    assert names(steps) == [UPGRADE_HOOK]
    assert steps[0].flow_run_id == "flow-run-1"
    assert ports.helm.applied == []  # the action did not call upgrade_deployment_version
    result = ports.server.ends[TASK].result
    assert result is not None and result.applied is None


async def test_an_upgrade_runs_pre_core_and_post_in_order() -> None:
    ports = fakes(
        action("check", "upgrade", "pre"),
        action("upgrade", "upgrade", "core"),
        action("after", "upgrade", "post"),
    )
    await installed(ports)
    steps = await run(ports, upgrade(app_version="2.0.0"))
    assert names(steps) == ["Run the upgrade pre-hook", UPGRADE_HOOK, "Run the upgrade post-hook"]
    assert ports.runner.ran == ["check", "upgrade", "after"]


async def test_a_failing_pre_hook_fails_the_upgrade_and_later_modes_do_not_run() -> None:
    ports = fakes(action("check", "upgrade", "pre", "fails"), action("after", "upgrade", "post", "announce"))
    ports.runner.fail("fails", "Migration 0042 failed: table users is locked")
    await installed(ports)
    steps = await run(ports, upgrade(app_version="2.0.0"))
    assert names(steps) == ["Run the upgrade pre-hook"]
    assert steps[0].error == "Action check failed: Migration 0042 failed: table users is locked"
    assert ports.runner.ran == ["fails"] and ports.helm.applied == []
    assert ports.server.ends[TASK].status == "failed"


async def test_an_upgrade_an_action_requested_applies_the_chart_without_hooks() -> None:
    ports = fakes(action("check", "upgrade", "pre"), action("upgrade", "upgrade", "core"))
    await installed(ports)
    steps = await run(ports, upgrade(app_version="2.0.0", run_hooks=False))
    assert names(steps) == [APPLY_VERSION_STEP]
    assert ports.runner.runs == []
    assert [a.app_version for a in ports.helm.applied] == ["2.0.0"]


async def test_an_upgrade_that_finds_a_later_revision_still_runs_its_hooks_and_leaves_the_cluster() -> None:
    ports = fakes(
        action("check", "upgrade", "pre", "announce"), action("after", "upgrade", "post", "announce")
    )
    await installed(ports)
    ports.cluster.styrmin_deployments[(NAME, NAME)]["revision"] = 99
    steps = await run(ports, upgrade(app_version="2.0.0", revision=5))
    assert names(steps) == ["Run the upgrade pre-hook", UPGRADE_HOOK, "Run the upgrade post-hook"]
    assert [s.status for s in steps] == ["succeeded"] * 3
    assert ports.runner.ran == ["announce", "announce"]
    assert (
        "already holds revision 99" in steps[1].notes[0] and "still runs its own hooks" in steps[1].notes[0]
    )
    assert ports.helm.applied == []
    assert ports.cluster.styrmin_deployments[(NAME, NAME)]["revision"] == 99
    result = ports.server.ends[TASK].result
    assert result is not None and result.applied is None


# --- configure, stop, start -------------------------------------------------------------------------


async def test_a_configuration_change_that_finds_a_later_revision_leaves_the_cluster_unchanged() -> None:
    ports = fakes()
    await installed(ports)
    ports.cluster.styrmin_deployments[(NAME, NAME)]["revision"] = 99
    steps = await run(ports, claim("configure", values={"replicas": 3}))
    assert ports.server.ends[TASK].status == "succeeded"
    assert names(steps) == [APPLY_CONFIGURATION_STEP]
    assert "already holds revision 99" in steps[0].notes[0]
    assert ports.helm.applied == [] and ports.cluster.styrmin_deployments[(NAME, NAME)]["revision"] == 99


async def test_a_configuration_change_keeps_a_stopped_component_stopped() -> None:
    ports = fakes()
    await installed(ports)
    steps = await run(
        ports, claim("configure", stopped=["task-worker"], values={"taskWorker": {"replicas": 2}})
    )
    assert names(steps) == [APPLY_CONFIGURATION_STEP]
    assert ports.helm.applied[0].stopped_components == ("task-worker",)
    seen = {c.name: c for c in ports.server.ends[TASK].components or []}
    assert seen["task-worker"].replicas == 0 and seen["server"].replicas == 1
    written = ports.cluster.styrmin_deployments[(NAME, NAME)]
    assert written["stoppedComponents"] == ["task-worker"] and written["revision"] == 2


async def test_stop_then_start_scale_the_component_to_zero_and_back_to_its_configured_replicas() -> None:
    ports = fakes()
    ports.helm.replicas["task-worker"] = 2
    await installed(ports)
    stopped = await run(ports, claim("stop", stopped=["task-worker"], components=["task-worker"]))
    assert [(s.name, s.status) for s in stopped] == [(STOP_STEP, "succeeded")]
    workload = ports.cluster.workloads[(NAME, "Deployment", f"{NAME}-task-worker")]
    assert workload.replicas == 0 and workload.configured_replicas == 2
    ports.server.steps.clear()
    started = await run(ports, claim("start", revision=3, components=["task-worker"]))
    assert [(s.name, s.status) for s in started] == [(START_STEP, "succeeded")]
    assert ports.cluster.workloads[(NAME, "Deployment", f"{NAME}-task-worker")].replicas == 2
    # Nothing else changed since the install: both set the replicas in place, with no Helm upgrade.
    assert [r.stopped_components for r in ports.helm.scaled_in_place] == [("task-worker",), ()]
    assert ports.helm.applied == []


async def test_a_stop_after_a_configuration_change_not_yet_applied_is_a_helm_upgrade() -> None:
    ports = fakes()
    await installed(ports)
    steps = await run(
        ports,
        claim(
            "stop",
            stopped=["task-worker"],
            components=["task-worker"],
            values={"taskWorker": {"replicas": 2}},
        ),
    )
    assert [(s.name, s.status) for s in steps] == [(STOP_STEP, "succeeded")]
    assert ports.helm.scaled_in_place == []
    assert ports.helm.applied[-1].configuration.values == {"taskWorker": {"replicas": 2}}


async def test_a_stop_that_a_later_change_undid_changes_nothing_and_says_the_later_change_decides() -> None:
    ports = fakes()
    await installed(ports)
    steps = await run(ports, claim("stop", stopped=[], components=["task-worker"]))
    assert steps[0].error is not None
    assert steps[0].error.startswith(
        f'Cannot stop task-worker of deployment "{NAME}": a later change starts it again'
    )
    assert ports.helm.applied == []


async def test_a_start_whose_component_a_later_change_scaled_meanwhile_names_that_change() -> None:
    ports = fakes()
    await installed(ports, stopped=["task-worker"])
    ports.cluster.scaled_by_others[f"{NAME}-task-worker"] = (0, 9)
    steps = await run(ports, claim("start", revision=3, components=["task-worker"]))
    assert steps[0].error == (
        f'Component "task-worker" of deployment "{NAME}" was scaled to 0 replicas by a later change '
        "(revision 9) while this task waited for it to reach 1, so it never will. The later change "
        "decides; request this one again if it should still apply."
    )


async def test_a_stop_whose_component_was_scaled_outside_styrmin_says_so() -> None:
    ports = fakes()
    await installed(ports)
    ports.cluster.scaled_by_others[f"{NAME}-task-worker"] = (3, None)
    steps = await run(ports, claim("stop", stopped=["task-worker"], components=["task-worker"]))
    assert steps[0].error is not None
    assert "was scaled to 3 replicas by another change, or someone outside Styrmin," in steps[0].error


# --- delete -------------------------------------------------------------------------------------------


async def test_delete_uninstalls_and_removes_the_styrmin_deployment_without_reporting_components() -> None:
    ports = fakes()
    await installed(ports)
    steps = await run(ports, claim("delete"))
    assert [(s.name, s.status, s.notes) for s in steps] == [(UNINSTALL_STEP, "succeeded", [])]
    assert ports.cluster.styrmin_deployments == {} and ports.cluster.workloads == {}
    assert ports.server.ends[TASK].components is None


async def test_deleting_a_deployment_never_installed_notes_it() -> None:
    ports = fakes()
    steps = await run(ports, claim("delete"))
    assert steps[0].notes == [f"Release {NAME} was not installed."]
    assert ports.server.ends[TASK].status == "succeeded"


# --- backups ------------------------------------------------------------------------------------------


def backup_claim(**extra: Any) -> Claim:
    return claim("backup", backup_id=11, key=f"{NAME}-11", **extra)


async def test_a_backup_runs_its_hook_then_records_the_files_its_actions_wrote() -> None:
    ports = fakes(action("dump", "backup", "core"))
    assert ports.backups is not None
    storage = ports.backups.storage
    ports.runner.on_run("dump", lambda run: storage.write(f"{NAME}-11", "db.sqlite", b"rows"))
    steps = await run(ports, backup_claim())
    assert names(steps) == ["Run the backup hook", RECORD_FILES_STEP]
    context = ports.runner.runs[0].parameters["context"]
    assert (context["backup_id"], context["backup_folder"]) == (11, f"/fake-backups/{NAME}-11")
    result = ports.server.ends[TASK].result
    assert result is not None and result.backup is not None
    assert [(f.name, f.size) for f in result.backup.files] == [("db.sqlite", 4)]
    assert ports.cluster.secrets == {}


async def test_a_backup_whose_actions_wrote_nothing_fails_saying_there_is_nothing_to_restore() -> None:
    ports = fakes(action("dump", "backup", "core"))
    steps = await run(ports, backup_claim())
    assert steps[-1].name == RECORD_FILES_STEP
    assert steps[-1].error is not None and "wrote no file into /fake-backups/shop-a-11" in steps[-1].error


async def test_a_backup_into_a_bucket_gives_its_jobs_the_keys_through_a_secret() -> None:
    ports = fakes(action("dump", "backup", "core"))
    assert ports.backups is not None
    ports.backups.bucket_keys = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    await run(ports, backup_claim())
    assert ports.cluster.secrets[(NAME, CREDENTIALS_SECRET)]["AWS_ACCESS_KEY_ID"] == "id"
    assert ports.runner.runs[0].parameters["context"]["backup_env_from"] == CREDENTIALS_SECRET


async def test_an_agent_without_backup_storage_fails_a_backup_before_any_step() -> None:
    ports = fakes(action("dump", "backup", "core"))
    ports.backups = None
    steps = await run(ports, backup_claim())
    assert steps == [] and ports.server.ends[TASK].error == NO_BACKUP_STORAGE_ERROR


async def test_a_location_that_cannot_be_used_fails_the_backup_saying_so() -> None:
    ports = fakes(action("dump", "backup", "core"))
    assert ports.backups is not None
    ports.backups.error = "bucket shop-backups does not exist"
    steps = await run(ports, backup_claim())
    assert steps == []
    assert ports.server.ends[TASK].error == (
        "The backup storage location cannot be used: bucket shop-backups does not exist"
    )


def restore_claim(files: list[dict[str, Any]], **extra: Any) -> Claim:
    return claim(
        "restore",
        backup_id=11,
        key=f"{NAME}-11",
        files=files,
        from_app_version=extra.pop("from_app_version", "2.0.0"),
        from_driver_version="1.0.0",
        **extra,
    )


async def backed_up(ports: FakePorts) -> list[dict[str, Any]]:
    assert ports.backups is not None
    storage = ports.backups.storage
    storage.write(f"{NAME}-11", "db.sqlite", b"rows")
    return [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in storage.publish(f"{NAME}-11")]


async def test_a_restore_checks_the_files_brings_the_version_back_then_runs_the_restore_hook() -> None:
    ports = fakes(action("load", "restore", "core"))
    files = await backed_up(ports)
    steps = await run(ports, restore_claim(files))
    assert names(steps) == [CHECK_FILES_STEP, restore_version_step("1.0.0"), "Run the restore hook"]
    assert ports.linked.requested == [
        {
            "deployment": NAME,
            "app_version": "1.0.0",
            "driver_version": "1.0.0",
            "started_by_step": steps[1].id,
        }
    ]
    assert ports.runner.runs[0].parameters["context"]["backup_id"] == 11
    result = ports.server.ends[TASK].result
    assert result is not None and result.applied is not None and result.applied.app_version == "1.0.0"
    assert ports.backups is not None and ports.backups.storage.finished == [f"{NAME}-11"]


async def test_a_restore_at_the_backups_version_does_not_bring_it_back() -> None:
    ports = fakes(action("load", "restore", "core"))
    files = await backed_up(ports)
    steps = await run(ports, restore_claim(files, from_app_version="1.0.0"))
    assert names(steps) == [CHECK_FILES_STEP, "Run the restore hook"]
    assert ports.linked.requested == []


async def test_a_restore_whose_files_changed_is_refused_and_changes_nothing() -> None:
    ports = fakes(action("load", "restore", "core"))
    files = await backed_up(ports)
    files[0]["size"] = 999
    steps = await run(ports, restore_claim(files))
    assert names(steps) == [CHECK_FILES_STEP]
    assert steps[0].error is not None and steps[0].error.startswith(
        "Backup 11 cannot be restored: in fake storage"
    )
    assert "Nothing was changed; choose another backup." in steps[0].error
    assert ports.linked.requested == [] and ports.runner.runs == []
    assert ports.backups is not None and ports.backups.storage.finished == [f"{NAME}-11"]


async def test_a_restore_whose_linked_upgrade_failed_fails_naming_that_task() -> None:
    ports = fakes(action("load", "restore", "core"))
    ports.linked.ends_with = LinkedTask(id=41, failed=True, error="Run the upgrade hook failed")
    steps = await run(ports, restore_claim(await backed_up(ports)))
    assert steps[-1].error == (
        "Task 41 (upgrade to application version 1.0.0, driver 1.0.0) failed: Run the upgrade hook failed"
    )
    assert ports.runner.runs == []


async def test_deleting_a_backup_removes_its_files_and_says_from_where() -> None:
    ports = fakes()
    await backed_up(ports)
    steps = await run(
        ports, claim("delete-backup", backup_id=11, key=f"{NAME}-11", status_before="succeeded")
    )
    assert [(s.name, s.status) for s in steps] == [(DELETE_FILES_STEP, "succeeded")]
    result = ports.server.ends[TASK].result
    assert result is not None and result.deleted is not None
    assert (result.deleted.location, result.deleted.key) == ("fake storage", f"{NAME}-11")
    assert ports.backups is not None and ports.backups.storage.stored == {}


# --- the plan is what runs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "claimed",
    [
        claim("create", revision=1),
        upgrade(app_version="2.0.0"),
        upgrade(app_version="2.0.0", run_hooks=False),
        claim("configure"),
        claim("stop", stopped=["task-worker"], components=["task-worker"]),
        claim("delete"),
    ],
    ids=lambda c: c.change_type.value,
)
async def test_the_recorded_steps_are_the_changes_plan(claimed: Claim) -> None:
    ports = fakes(
        action("pre", "setup", "pre", "announce"),
        action("check", "upgrade", "pre", "announce"),
        action("after", "upgrade", "post", "announce"),
    )
    planned = (await Reconciliation(ports.ports, claimed).plan()).step_names
    assert names(await run(ports, claimed)) == planned
    assert ports.server.ends[TASK].status == "succeeded"


# --- the periodic report ------------------------------------------------------------------------


async def test_a_report_of_components_that_did_not_change_is_not_sent_again() -> None:
    ports = fakes()
    await installed(ports)
    reconciliation = Reconciliation(ports.ports, claim("create", revision=1))
    ports.server.reported.clear()

    seen = await reconciliation.report_components()
    again = await reconciliation.report_components(unless=seen)
    key = (NAME, "Deployment", f"{NAME}-task-worker")
    ports.cluster.workloads[key] = replace(ports.cluster.workloads[key], ready_replicas=0)  # its pod went
    changed = await reconciliation.report_components(unless=again)

    assert again == seen
    assert [components for _, components in ports.server.reported] == [seen, changed]
    worker = {c.name: c for c in changed or []}["task-worker"]
    assert worker.ready_replicas == 0
