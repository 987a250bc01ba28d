"""`styrminctl apply`, `--dry-run`, `deployments history` and `rollback` against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.sdk.server import in_background, run_task, unique

from .conftest import Ctl


def _apply(ctl: Ctl, file: Path, *extra: str) -> tuple[int, str]:
    result = ctl("apply", "-f", str(file), *extra)
    return result.exit_code, result.output


def _task_of(ctl: Ctl, name: str) -> int:
    tasks = json.loads(ctl("tasks", "list", "-d", name, "-o", "json").stdout)
    return int(tasks["items"][0]["id"])


def test_apply_creates_then_changes_then_prints_unchanged(ctl: Ctl, tmp_path: Path) -> None:
    name = unique("shop")
    file = tmp_path / "deployment.yaml"
    file.write_text(f"name: {name}\ndriver: demo\ndriver_version: 1.0.0\n")

    created = _apply(ctl, file)
    run_task(ctl.server, _task_of(ctl, name))
    file.write_text(file.read_text() + "configuration:\n  values:\n    replicas: 2\n")
    changed = _apply(ctl, file)
    unchanged = _apply(ctl, file)

    assert created[0] == 0 and "revision 1" in created[1]
    assert changed[0] == 0 and "revision 2" in changed[1]
    assert unchanged == (0, f'Deployment "{name}" unchanged.\n')


def test_what_deployments_get_prints_is_a_file_apply_takes(ctl: Ctl, tmp_path: Path) -> None:
    name = ctl.deployment()
    file = tmp_path / "got.yaml"
    file.write_text(ctl("deployments", "get", name, "-o", "yaml").stdout)

    assert _apply(ctl, file) == (0, f'Deployment "{name}" unchanged.\n')


def test_apply_reads_standard_input_as_kubectl_users_pipe_to_it(ctl: Ctl) -> None:
    name = ctl.deployment()
    got = ctl("deployments", "get", name, "-o", "yaml").stdout  # deployments get -o yaml | apply -f -

    applied = ctl("apply", "-f", "-", input=got)

    assert (applied.exit_code, applied.output) == (0, f'Deployment "{name}" unchanged.\n')
    bad = ctl("apply", "-f", "-", input="name: shop\ndriver: demo\ndriver_version: 1.0.0\nconfiguration: 3\n")
    assert bad.exit_code == 2
    assert "standard input, line 4, configuration: must be a mapping" in bad.output


def test_an_apply_file_that_is_not_valid_names_the_line_and_field_and_exits_2(
    ctl: Ctl, tmp_path: Path
) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text("name: shop\ndriver: demo\ndriver_version: 1.0.0\nconfiguration:\n  valus: {}\n")

    code, output = _apply(ctl, file)

    assert code == 2
    assert f"{file}, line 5, configuration.valus: not a part of a configuration" in output


def test_upgrade_dry_run_shows_the_steps_and_versions_and_records_nothing(ctl: Ctl) -> None:
    name = ctl.deployment()
    run_task(ctl.server, _task_of(ctl, name))

    result = ctl("deployments", "upgrade", name, "--app-version", "2.0.0", "--dry-run")
    again = json.loads(ctl("deployments", "get", name, "-o", "json").stdout)

    assert result.exit_code == 0, result.output
    assert "driver 1.0.0, app 1.0.0 -> driver 1.0.0, app 2.0.0" in result.output
    assert "1. Run the upgrade hook" in result.output
    assert "Deployment/" in result.output
    assert again["revision"] == 1 and again["app_version"] == "1.0.0"


def test_a_dry_run_that_would_be_refused_exits_1_with_the_request_s_message(ctl: Ctl) -> None:
    name = ctl.deployment()

    result = ctl("deployments", "upgrade", name, "--driver-version", "9.9.9", "--dry-run")

    assert result.exit_code == 1
    assert "Refused: Driver demo has no version 9.9.9" in result.output


def test_history_lists_revisions_and_rollback_restores_a_configuration(ctl: Ctl) -> None:
    name = ctl.deployment()
    run_task(ctl.server, _task_of(ctl, name))
    assert ctl("deployments", "set", name, "--set", "replicas=3").exit_code == 0
    run_task(ctl.server, _task_of(ctl, name))

    rolled = ctl("deployments", "rollback", name, "--to-revision", "1")
    rows = ctl("deployments", "history", name).stdout.splitlines()
    one = yaml.safe_load(ctl("deployments", "history", name, "--revision", "2", "-o", "yaml").stdout)
    now = json.loads(ctl("deployments", "get", name, "-o", "json").stdout)

    assert rolled.exit_code == 0, rolled.output
    assert rows[0].split()[:4] == ["REVISION", "TYPE", "DRIVER", "APP"]
    assert [row.split()[:2] for row in rows[1:]] == [["3", "configure"], ["2", "configure"], ["1", "create"]]
    assert one["configuration"]["values"] == {"replicas": 3}
    assert now["configuration"]["values"] == {}


def test_apply_dry_run_of_a_new_deployment_shows_its_create_and_creates_nothing(
    ctl: Ctl, tmp_path: Path
) -> None:
    name = unique("shop")
    file = tmp_path / "new.yaml"
    file.write_text(f"name: {name}\ndriver: demo\ndriver_version: 1.0.0\n")

    code, output = _apply(ctl, file, "--dry-run")

    assert code == 0, output
    assert "Change: create (revision 1)" in output
    assert "Install the application" in output
    assert ctl("deployments", "get", name).exit_code == 1


def _run_tasks_of(ctl: Ctl, name: str, count: int) -> None:
    """Carry out the deployment's first ``count`` tasks in order, as they appear."""
    import time

    import httpx

    from styrmin import Client
    from styrmin.errors import NotFoundError

    done: set[int] = set()
    # A transport of its own: the CLI runner changes os.environ in the main thread meanwhile.
    with Client(ctl.server.url, ctl.server.admin_token(), transport=httpx.HTTPTransport()) as client:
        for _ in range(800):
            try:
                tasks = client.tasks.list(deployment=name, limit=10).items
            except NotFoundError:
                tasks = []
            for task in sorted(tasks, key=lambda t: t.id):
                if task.id not in done:
                    run_task(ctl.server, task.id, pause=0.1)
                    done.add(task.id)
            if len(done) >= count:
                return
            time.sleep(0.05)
    raise AssertionError(f"only {len(done)} of {count} tasks appeared")


def test_apply_prints_one_document_for_a_create_and_a_stop(ctl: Ctl, tmp_path: Path) -> None:
    name = unique("shop")
    file = tmp_path / "deployment.yaml"
    file.write_text(f"name: {name}\ndriver: demo\ndriver_version: 1.0.0\nstopped_components: [worker]\n")

    code, output = _apply(ctl, file, "-o", "yaml")
    again = ctl("apply", "-f", str(file), "-o", "json")

    assert code == 0, output
    created = yaml.safe_load(output)  # one document, else safe_load refuses
    assert created["outcome"] == "created"
    assert [c["task"]["type"] for c in created["changes"]] == ["create", "stop"]
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {"outcome": "unchanged", "changes": []}


def test_apply_with_wait_prints_one_document_with_every_ended_task(ctl: Ctl, tmp_path: Path) -> None:
    name = unique("shop")
    file = tmp_path / "deployment.yaml"
    file.write_text(f"name: {name}\ndriver: demo\ndriver_version: 1.0.0\nstopped_components: [worker]\n")

    worker = in_background(_run_tasks_of, ctl, name, 2)
    result = ctl("apply", "-f", str(file), "--wait", "--timeout", "120", "-o", "json")
    worker.join()

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["outcome"] == "created"
    assert [(c["task"]["type"], c["task"]["status"]) for c in body["changes"]] == [
        ("create", "succeeded"),
        ("stop", "succeeded"),
    ]
    assert body["changes"][1]["task"]["steps"]  # the ended Task, not its summary


def test_rollback_prints_the_same_document_whether_or_not_something_changes(ctl: Ctl) -> None:
    name = ctl.deployment()
    run_task(ctl.server, _task_of(ctl, name))
    assert ctl("deployments", "set", name, "--set", "replicas=3").exit_code == 0

    rolled = ctl("deployments", "rollback", name, "--to-revision", "1", "-o", "json")
    again = ctl("deployments", "rollback", name, "--to-revision", "1", "-o", "json")

    assert rolled.exit_code == 0 and again.exit_code == 0, rolled.output + again.output
    changed, unchanged = json.loads(rolled.stdout), json.loads(again.stdout)
    assert set(changed) == set(unchanged) == {"to_revision", "changes", "backup"}
    assert [c["task"]["type"] for c in changed["changes"]] == ["configure"]
    assert unchanged["changes"] == []
