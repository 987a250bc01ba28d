"""styrminctl's habits, shared with kubectl, Helm and Velero: the newest driver version when none is
named, lists of everything with filters and -o wide/name, get that exits 0 once it could read, errors
as JSON or YAML with a stable code, completion of names and ids, and questions before destroying."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import yaml

from styrmin.cli import _common
from styrmin_backend.store.models import BackupRow, DeploymentRow
from tests.sdk.server import LiveServer, unique

from .conftest import Ctl


def test_a_driver_named_without_a_version_takes_the_newest_and_says_which(ctl: Ctl) -> None:
    name = unique("newest")
    created = ctl("deployments", "create", name, "--driver", "demo", "-o", "json")
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["deployment"]["driver_version"] == "2.0.0"
    assert "Using driver demo@2.0.0, the newest of 2" in created.stderr
    missing = ctl("deployments", "create", unique("x"), "--driver", "nosuchdriver")
    assert missing.exit_code == 2 and 'There is no driver "nosuchdriver"' in missing.stderr
    twice = ctl("deployments", "create", unique("x"), "--driver", "demo@1.0.0", "--driver-version", "2.0.0")
    assert twice.exit_code == 2 and "give the version once" in twice.stderr  # was: no driver "demo@1.0.0"


def _record_backup(server: LiveServer, deployment: str, status: str) -> int:
    with server.session() as session:
        row = session.query(DeploymentRow).filter_by(name=deployment).one()
        backup = BackupRow(
            deployment_id=row.id,
            deployment_name=deployment,
            driver_name="demo",
            driver_version="1.0.0",
            app_version="1.0.0",
            revision=1,
            configuration={},
            location="/backups",
            key=f"{deployment}/{status}",
            files=[],
            status=status,
            label="manual",
            requested_by="admin",
            created_at=datetime.now(UTC),
        )
        session.add(backup)
        session.commit()
        return int(backup.id)


def test_backups_list_lists_every_backup_and_filters_by_deployment_and_status(ctl: Ctl) -> None:
    first, second = ctl.deployment(), ctl.deployment()
    ok = _record_backup(ctl.server, first, "succeeded")
    bad = _record_backup(ctl.server, second, "failed")
    everything = json.loads(ctl("backups", "list", "-o", "json").stdout)
    ids = [b["id"] for b in everything]
    assert ids.index(bad) < ids.index(ok)  # newest first, both deployments
    assert [
        b["id"] for b in json.loads(ctl("backups", "list", "--deployment", first, "-o", "json").stdout)
    ] == [ok]
    failed = json.loads(ctl("backups", "list", "--status", "failed", "-o", "json").stdout)
    assert bad in [b["id"] for b in failed] and ok not in [b["id"] for b in failed]
    names = ctl("backups", "list", "-d", second, "-o", "name")
    assert names.stdout == f"backup/{bad}\n"
    table = ctl("backups", "list", "-d", second)
    assert second in table.stdout and "DEPLOYMENT" in table.stdout.splitlines()[0]
    wide = ctl("backups", "list", "-d", second, "-o", "wide")
    assert "REQUESTED BY" in wide.stdout.splitlines()[0] and "/backups" in wide.stdout
    # A read-only user reads them all too.
    reader = unique("reader")
    ctl.server.stack.make_user(reader, _role("read-only"))
    as_reader = ctl("backups", "list", "-o", "json", env={"STYRMIN_TOKEN": ctl.server.token_for(reader)})
    assert {ok, bad} <= {b["id"] for b in json.loads(as_reader.stdout)}


def _role(value: str) -> object:
    from styrmin_backend.domain.roles import Role

    return Role(value)


def test_list_commands_print_names_a_wider_table_and_filter_on_the_server(ctl: Ctl) -> None:
    name = ctl.deployment()
    names = ctl("deployments", "list", "-o", "name").stdout.splitlines()
    assert f"deployment/{name}" in names and all(line.startswith("deployment/") for line in names)
    wide = ctl("deployments", "list", "-o", "wide")
    header = wide.stdout.splitlines()[0]
    assert "CLUSTER" in header and "REASON" in header
    assert name in ctl("deployments", "list", "--status", "deploying", "-o", "name").stdout
    assert name not in ctl("deployments", "list", "--status", "running", "-o", "name").stdout
    assert name in ctl("deployments", "list", "--driver", "demo", "--cluster", "local", "-o", "name").stdout
    assert ctl("deployments", "list", "--cluster", "nowhere").stdout.strip() == "No deployments match."
    assert (
        ctl("drivers", "list", "-o", "name", "--driver", "demo").stdout
        == "driver/demo@1.0.0\ndriver/demo@2.0.0\n"
    )
    assert "CHECKSUM" in ctl("drivers", "list", "-o", "wide").stdout.splitlines()[0]
    tasks = ctl("tasks", "list", "-d", name, "-o", "name").stdout.splitlines()
    assert len(tasks) == 1 and tasks[0].startswith("task/")
    assert "CREATED" in ctl("tasks", "list", "-o", "wide").stdout.splitlines()[0]
    assert "user/admin" in ctl("users", "list", "-o", "name").stdout.splitlines()
    refused = ctl("deployments", "list", "--status", "asleep", "-o", "json")
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["error"]["code"] == "invalid"


def test_get_commands_print_kind_slash_name_as_kubectl_does(ctl: Ctl) -> None:
    name = ctl.deployment()
    (task,) = ctl("tasks", "list", "-d", name, "-o", "name").stdout.splitlines()

    assert ctl("deployments", "get", name, "-o", "name").stdout == f"deployment/{name}\n"
    assert ctl("tasks", "get", task.removeprefix("task/"), "-o", "name").stdout == f"{task}\n"
    assert ctl("drivers", "get", "demo@2.0.0", "-o", "name").stdout == "driver/demo@2.0.0\n"
    assert ctl("users", "get", "admin", "-o", "name").stdout == "user/admin\n"
    missing = ctl("deployments", "get", "no-such-deployment", "-o", "name")  # as kubectl: an error
    assert missing.exit_code == 1 and missing.stdout == ""


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_errors_under_a_machine_format_are_documents_with_a_stable_code(ctl: Ctl, fmt: str) -> None:
    def error_of(*args: str, **kwargs: object) -> dict[str, object]:
        result = ctl(*args, "-o", fmt, **kwargs)  # type: ignore[arg-type]
        assert result.exit_code != 0 and result.stderr == "", result.output
        document = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
        assert document["error"]["exit_code"] == result.exit_code
        return document["error"]  # type: ignore[no-any-return]

    missing = error_of("tasks", "get", "424242")
    assert missing["code"] == "not_found" and missing["status"] == 404
    assert "There is no task 424242." in str(missing["message"])
    assert error_of("deployments", "get", "x", auth=False)["code"] == "usage"
    assert error_of("whoami", env={"STYRMIN_URL": "http://127.0.0.1:9"})["code"] == "unreachable"
    assert error_of("deployments", "list", env={"STYRMIN_TOKEN": "sty_wrong"})["code"] == "unauthenticated"


def test_get_exits_0_for_a_failed_task_and_wait_exits_1(ctl: Ctl) -> None:
    from tests.sdk.server import run_task

    name = ctl.deployment()
    task_id = json.loads(ctl("tasks", "list", "-d", name, "-o", "json").stdout)["items"][0]["id"]
    run_task(ctl.server, task_id, fail=True)
    got = ctl("tasks", "get", str(task_id), "-o", "json")
    assert got.exit_code == 0 and json.loads(got.stdout)["status"] == "failed"
    assert ctl("tasks", "wait", str(task_id), "-o", "json").exit_code == 1


def test_completion_offers_deployment_names_and_task_ids(ctl: Ctl, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer.main

    from styrmin.cli import app

    ctx = typer.Context(typer.main.get_command(app))  # no global option on the line being completed
    name = ctl.deployment()
    monkeypatch.setenv("STYRMIN_URL", ctl.server.url)
    monkeypatch.setenv("STYRMIN_TOKEN", ctl.token)
    monkeypatch.setenv("STYRMINCTL_CONFIG", str(ctl.config))
    assert name in _common.complete_deployment(ctx, name[:6])
    assert _common.complete_deployment(ctx, "zzz-nothing") == []
    task_id = json.loads(ctl("tasks", "list", "-d", name, "-o", "json").stdout)["items"][0]["id"]
    assert str(task_id) in _common.complete_task(ctx, str(task_id))
    monkeypatch.setenv("STYRMIN_URL", "http://127.0.0.1:9")  # no server: nothing, and no error
    assert _common.complete_deployment(ctx, "") == [] and _common.complete_task(ctx, "") == []


def test_the_shell_completion_script_completes_deployment_names(ctl: Ctl) -> None:
    """As the shell runs it: a process of its own (in-process completion would leave state behind)."""
    from tests.cli.test_process import styrminctl

    name = ctl.deployment()
    result = styrminctl(
        env={
            "_STYRMINCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": f"styrminctl deployments get {name[:8]}",
            "COMP_CWORD": "3",
            "STYRMIN_URL": ctl.server.url,
            "STYRMIN_TOKEN": ctl.token,
            "STYRMINCTL_CONFIG": str(ctl.config),
        }
    )
    assert name in result.stdout.split(), result.stderr


def test_destructive_commands_refuse_without_yes_when_no_one_can_answer(ctl: Ctl) -> None:
    name = ctl.deployment()
    for args in (
        ("deployments", "delete", name),
        ("deployments", "restore", name, "--backup", "1"),
        ("backups", "delete", "1"),
        ("agents", "revoke", "nobody"),
    ):
        refused = ctl(*args)
        assert refused.exit_code == 2, args
        assert "standard input is not a terminal. Add --yes to do it anyway." in refused.stderr
    assert json.loads(ctl("deployments", "get", name, "-o", "json").stdout)["status"] == "deploying"


def test_destructive_commands_ask_on_a_terminal(ctl: Ctl, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_common, "stdin_is_terminal", lambda: True)
    name = ctl.deployment()
    declined = ctl("deployments", "delete", name, input="n\n")
    assert declined.exit_code == 1 and "Nothing was changed." in declined.stderr
    assert f"Delete deployment {name}" in declined.stdout
    accepted = ctl("deployments", "delete", name, input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert f"Deleting {name}" in accepted.stdout
