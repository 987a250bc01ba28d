"""`styrminctl tasks`: the rendering of a task and its steps, waiting live, and exit codes."""

from __future__ import annotations

import json

import httpx
import yaml

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.services import workflow
from tests.sdk.server import in_background, run_task

from .conftest import Ctl

TASK_FIELDS = {
    "id", "type", "status", "deployment", "revision", "requested_by", "created_at", "started_at",
    "ended_at", "error", "parent_task_id", "result", "started_by", "steps", "cancelled_by", "cancelled_at",
    "stopped_at", "waiting",
}  # fmt: skip
STEP_FIELDS = {
    "id", "position", "name", "status", "started_at", "ended_at", "error", "output_tail",
    "output_truncated", "notes", "flow_run_id", "started_tasks",
}  # fmt: skip


def assert_in_order(text: str, *fragments: str) -> None:
    """Each fragment appears in ``text``, after the previous one."""
    at = 0
    for fragment in fragments:
        found = text.find(fragment, at)
        assert found >= 0, f"{fragment!r} not found after position {at} in:\n{text}"
        at = found + len(fragment)


def _upgrade_with_a_failed_hook(ctl: Ctl) -> tuple[int, int, int]:
    """An upgrade whose hook step has a note, a cut output and started a stop task (which succeeded)."""
    name = ctl.deployment()
    result = ctl("deployments", "upgrade", name, "--app-version", "2.0.0", "-o", "json")
    upgrade_id = json.loads(result.stdout)["task"]["id"]
    server = ctl.server
    with server.session() as session:
        workflow.start_task(session, upgrade_id)
        step = workflow.add_step(session, upgrade_id, hook_step_name(Hook.UPGRADE, Mode.CORE))
        workflow.add_step_note(session, step.id, "Deleted Job shop-migrate-1 of an earlier action.")
        step_id = step.id
    child = ctl(
        "deployments",
        "stop",
        name,
        "worker",
        "-o",
        "json",
        env={"STYRMIN_TOKEN": server.actions_token(upgrade_id)},
    )
    assert child.exit_code == 0, child.output
    # styrminctl never links a change to a step; only actions (through the SDK) do:
    from styrmin import Client

    with Client(server.url, server.actions_token(upgrade_id)) as actions:
        linked = actions.deployments.start(name, ["worker"], started_by_step=step_id)
    assert linked.task is not None
    run_task(server, linked.task.id)
    with server.session() as session:
        workflow.set_step_output(
            session, step_id, "line 199\nline 200\x1b[31m red\x1b[0m\n", output_truncated=True
        )
        workflow.end_step(session, step_id, error="Job shop-migrate-2 failed with exit code 3.")
        workflow.end_task(session, upgrade_id, error="The upgrade hook failed.")
    return upgrade_id, step_id, linked.task.id


def test_tasks_get_shows_the_task_then_each_step_with_its_output_notes_and_started_tasks(ctl: Ctl) -> None:
    upgrade_id, _, child_id = _upgrade_with_a_failed_hook(ctl)
    result = ctl("tasks", "get", str(upgrade_id))
    assert result.exit_code == 0, result.output  # read: 0, although the task failed
    out = result.stdout
    assert_in_order(
        out,
        f"Task:          {upgrade_id}",
        "Type:          upgrade",
        "Status:        failed",
        "Requested by:  admin",
        "Duration:",
        "Error:         The upgrade hook failed.",
        "Result:",
        "started_tasks:",
        f"task_id: {child_id}",
        "Steps:",
        "  1. Run the upgrade hook  failed",
        "Error:  Job shop-migrate-2 failed with exit code 3.",
        "Note:   Deleted Job shop-migrate-1 of an earlier action.",
        "Output:",
        "Earlier output was cut; this is the end of it.",
        "| line 199",
        "| line 200 red",
        "Started tasks:",
        f"Task {child_id} (start): succeeded",
        "Result:",
        "rolled_out:",
        "- server",
    )
    assert "Started by" not in out  # a person asked for the upgrade
    assert "\x1b" not in out  # the job's colour codes are not passed to the terminal


def test_a_task_an_action_started_says_so(ctl: Ctl) -> None:
    upgrade_id, step_id, child_id = _upgrade_with_a_failed_hook(ctl)
    result = ctl("tasks", "get", str(child_id))
    assert result.exit_code == 0, result.output
    assert_in_order(
        result.stdout,
        "Type:          start",
        "Status:        succeeded",
        "Requested by:  styrmin-actions",
        f'Started by:    step "Run the upgrade hook" (step {step_id}) of task {upgrade_id} (upgrade)',
        "Result:",
        "rolled_out:",
        "Steps:",
        "  1. Render the chart  succeeded",
        "  2. Apply the workloads  succeeded",
    )
    assert "Earlier output was cut" not in result.stdout


def test_tasks_get_as_json_and_yaml_has_the_documented_fields(ctl: Ctl) -> None:
    upgrade_id, step_id, child_id = _upgrade_with_a_failed_hook(ctl)
    as_json = ctl("tasks", "get", str(upgrade_id), "-o", "json")
    assert as_json.exit_code == 0
    task = json.loads(as_json.stdout)
    assert set(task) == TASK_FIELDS
    assert set(task["steps"][0]) == STEP_FIELDS
    assert task["steps"][0]["output_truncated"] is True
    assert set(task["steps"][0]["started_tasks"][0]) == {"id", "type", "status", "error", "result"}
    child = json.loads(ctl("tasks", "get", str(child_id), "-o", "json").stdout)
    assert child["started_by"] == {
        "task_id": upgrade_id,
        "task_type": "upgrade",
        "step_id": step_id,
        "step_name": "Run the upgrade hook",
    }
    as_yaml = yaml.safe_load(ctl("tasks", "get", str(upgrade_id), "-o", "yaml").stdout)
    assert as_yaml == task


def test_tasks_list_filters_and_pages(ctl: Ctl) -> None:
    name = ctl.deployment()
    for _ in range(2):
        assert ctl("deployments", "stop", name, "server").exit_code == 0
    table = ctl("tasks", "list", "--deployment", name)
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "DEPLOYMENT", "TYPE", "STATUS"]
    assert [line.split()[2] for line in lines[1:]] == ["stop", "stop", "create"]
    page = json.loads(ctl("tasks", "list", "-d", name, "--limit", "2", "-o", "json").stdout)
    assert set(page) == {"items", "next_before"} and len(page["items"]) == 2
    rest = ctl(
        "tasks", "list", "-d", name, "--limit", "2", "--before", str(page["next_before"]), "-o", "yaml"
    )
    assert [t["type"] for t in yaml.safe_load(rest.stdout)["items"]] == ["create"]
    assert f"--before {page['next_before']}" in ctl("tasks", "list", "-d", name, "--limit", "2").stdout
    only = json.loads(ctl("tasks", "list", "-d", name, "--type", "create", "-o", "json").stdout)
    assert [t["type"] for t in only["items"]] == ["create"]
    assert ctl("tasks", "list", "--status", "done").exit_code == 2  # not a status: usage


def test_tasks_wait_shows_steps_live_and_exits_0_when_the_task_succeeds(ctl: Ctl) -> None:
    name = ctl.deployment()
    created = json.loads(ctl("tasks", "list", "-d", name, "-o", "json").stdout)["items"][0]
    worker = in_background(run_task, ctl.server, created["id"], pause=1.5)
    result = ctl("tasks", "wait", str(created["id"]), "--timeout", "60")
    worker.join()
    assert result.exit_code == 0, result.output
    # The first state seen depends on how fast the CLI starts (pending, or already running); each
    # step runs 1.5 s so that a CLI slow to start on a busy machine still sees it running.
    assert_in_order(
        result.stderr,
        f"Task {created['id']} (create of {name}): ",
        "running",
        "1. Render the chart: running",
        "1. Render the chart: succeeded in",
        "2. Apply the workloads: running",
        "2. Apply the workloads: succeeded in",
        f"Task {created['id']} (create of {name}): succeeded after",
    )
    assert_in_order(result.stdout, "Status:        succeeded", "Steps:", "1. Render the chart  succeeded")


def test_wait_exits_1_when_the_task_fails_or_the_timeout_passes(ctl: Ctl) -> None:
    name = ctl.deployment()
    task_id = json.loads(ctl("tasks", "list", "-d", name, "-o", "json").stdout)["items"][0]["id"]
    timed_out = ctl("tasks", "wait", str(task_id), "--timeout", "0.3")
    assert timed_out.exit_code == 1
    assert f"Task {task_id} has not ended after 0.3 seconds; it is pending." in timed_out.stderr
    worker = in_background(run_task, ctl.server, task_id, fail=True, output="boom\n")
    failed = ctl("tasks", "wait", str(task_id), "--timeout", "60", "-o", "json")
    worker.join()
    assert failed.exit_code == 1
    assert "2. Apply the workloads: failed" in failed.stderr
    assert "Job demo-apply failed with exit code 3." in failed.stderr
    assert json.loads(failed.stdout)["status"] == "failed"


def test_a_change_with_wait_follows_its_task(ctl: Ctl) -> None:
    name = ctl.deployment()
    run_task(ctl.server, _latest_task(ctl, name))
    running = in_background(_run_next_task, ctl, name, _latest_task(ctl, name), fail=False)
    ok = ctl("deployments", "upgrade", name, "--app-version", "2.0.0", "--wait", "--timeout", "60")
    running.join()
    assert ok.exit_code == 0, ok.output
    assert_in_order(ok.stdout, f"Upgrading {name}: revision 2, task", "Status:        succeeded", "Steps:")
    assert "Apply the workloads: succeeded" in ok.stderr

    failing = in_background(_run_next_task, ctl, name, _latest_task(ctl, name), fail=True)
    bad = ctl("deployments", "stop", name, "server", "--wait", "--timeout", "60", "-o", "json")
    failing.join()
    assert bad.exit_code == 1
    body = json.loads(bad.stdout)
    assert set(body) == {"deployment", "task"}
    assert body["task"]["status"] == "failed" and body["task"]["steps"][1]["status"] == "failed"

    # Its last change failed, so asking for the version it has is not "nothing to do": it starts again.
    again = in_background(_run_next_task, ctl, name, _latest_task(ctl, name), fail=False)
    upgraded = ctl("deployments", "upgrade", name, "--app-version", "2.0.0", "--wait", "--timeout", "60")
    again.join()
    assert upgraded.exit_code == 0, upgraded.output
    assert f"Upgrading {name}: revision 4, task" in upgraded.stdout and "Nothing to do" not in upgraded.stdout


def test_retry_a_failed_task_and_follow_the_new_one(ctl: Ctl) -> None:
    name = ctl.deployment()
    created = _latest_task(ctl, name)
    run_task(ctl.server, created, fail=True)
    shown = ctl("deployments", "get", name)
    assert "failed" in shown.stdout and f"The create change failed (task #{created})" in shown.stdout
    running = in_background(_run_next_task, ctl, name, created, fail=False)
    retried = ctl("tasks", "retry", str(created), "--wait", "--timeout", "60")
    running.join()
    assert retried.exit_code == 0, retried.output
    assert_in_order(
        retried.stdout, f"Retrying task {created} of {name}: revision 2, task", "Status:        succeeded"
    )
    again = ctl("tasks", "retry", str(created))
    assert again.exit_code == 1
    assert f"Task {created} is not the latest create task" in again.stderr
    succeeded = ctl("tasks", "retry", str(_latest_task(ctl, name)))
    assert succeeded.exit_code == 1 and "only a failed or cancelled task can be retried" in succeeded.stderr


def _latest_task(ctl: Ctl, name: str) -> int:
    task_id: int = json.loads(ctl("tasks", "list", "-d", name, "-l", "1", "-o", "json").stdout)["items"][0][
        "id"
    ]
    return task_id


def _run_next_task(ctl: Ctl, name: str, after: int, fail: bool) -> None:
    """Wait for the deployment's first task newer than ``after`` and carry it out."""
    import time

    from styrmin import Client

    # A transport of its own: httpx would otherwise look for proxies by iterating os.environ, which the
    # CLI runner changes in the main thread meanwhile (KeyError: a variable went away mid-iteration).
    with Client(ctl.server.url, ctl.server.admin_token(), transport=httpx.HTTPTransport()) as client:
        for _ in range(400):
            newer = [t for t in client.tasks.list(deployment=name, limit=5).items if t.id > after]
            if newer:
                run_task(ctl.server, newer[-1].id, fail=fail, pause=0.1)
                return
            time.sleep(0.05)
    raise AssertionError("no new task appeared")


def test_missing_task_exits_1_with_the_servers_message(ctl: Ctl) -> None:
    result = ctl("tasks", "get", "424242")
    assert result.exit_code == 1
    assert "error: There is no task 424242." in result.stderr


def test_cancel_a_pending_task_and_a_running_one_waiting_until_its_work_stopped(ctl: Ctl) -> None:
    from sqlalchemy import update

    from styrmin_backend.clock import utcnow
    from styrmin_backend.store.models import TaskRow

    name = ctl.deployment()
    pending = _latest_task(ctl, name)
    shown = ctl("tasks", "get", str(pending))
    assert "Waiting:" in shown.stdout and "No agent of cluster" in shown.stdout
    # It asks first; with no terminal to ask on and no --yes, it refuses and changes nothing.
    unasked = ctl("tasks", "cancel", str(pending))
    assert unasked.exit_code == 2 and "Add --yes" in unasked.stderr
    assert json.loads(ctl("tasks", "get", str(pending), "-o", "json").stdout)["status"] == "pending"
    cancelled = ctl("tasks", "cancel", str(pending), "--yes")
    assert cancelled.exit_code == 0, cancelled.output
    assert f"Cancelled task {pending} (create of {name})." in cancelled.stdout
    listed = ctl("tasks", "list", "-d", name)
    assert "cancelled" in listed.stdout
    again = ctl("tasks", "cancel", str(pending), "--yes")
    assert again.exit_code == 1 and f"Task {pending} already ended as cancelled" in again.stderr
    assert ctl("tasks", "get", str(pending)).exit_code == 0  # read: 0, as for a failed task
    assert ctl("tasks", "wait", str(pending)).exit_code == 1  # like a failed task

    retried = json.loads(ctl("tasks", "retry", str(pending), "-o", "json").stdout)["task"]["id"]
    server = ctl.server
    with server.session() as session:
        workflow.start_task(session, retried)
        workflow.add_step(session, retried, "Install")

    def agent_stops_it() -> None:  # as an agent does once its running action ended
        import time

        time.sleep(1.0)
        with server.session() as session:
            session.execute(update(TaskRow).where(TaskRow.id == retried).values(stopped_at=utcnow()))

    stopping = in_background(agent_stops_it)
    waited = ctl("tasks", "cancel", str(retried), "--wait", "--timeout", "60", "--yes")
    stopping.join()
    assert waited.exit_code == 0, waited.output
    assert_in_order(
        waited.stdout,
        f"Cancelled task {retried}",
        "Styrmin left the cluster as it was",
        "Status:        cancelled",
        "Cancelled by:  admin",
        "Install",
        "cancelled",
    )


def test_waiting_shows_why_the_server_says_the_task_waits_and_how_to_follow_it(ctl: Ctl) -> None:
    name = ctl.deployment()
    task_id = _latest_task(ctl, name)
    waiting = json.loads(ctl("tasks", "get", str(task_id), "-o", "json").stdout)["waiting"]
    assert waiting is not None and waiting["message"]  # no agent serves the test server's cluster

    timed_out = ctl("tasks", "wait", str(task_id), "--timeout", "0.5")
    as_json = ctl("tasks", "wait", str(task_id), "--timeout", "0.5", "-o", "json")

    assert timed_out.exit_code == 1
    assert f"Task {task_id} (create of {name}): pending  {waiting['message']}" in timed_out.stderr
    said = " ".join(timed_out.stderr.split())  # the error line may be wrapped at COLUMNS
    assert f"; it is pending. {waiting['message']}" in said
    assert f"The task goes on; follow it with: styrminctl tasks wait {task_id}" in said
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == "timeout" and "The task goes on" in error["message"]
