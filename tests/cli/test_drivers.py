"""`styrminctl drivers`: offline validation, push, list and get."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import yaml

from tests.sdk.server import unique, write_driver, write_invalid_driver

from .conftest import Ctl


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_validate_works_offline_and_summarises_a_valid_driver(ctl: Ctl, tmp_path: Path) -> None:
    folder = write_driver(tmp_path / "demo")
    result = ctl("drivers", "validate", str(folder), env={"STYRMIN_URL": _closed_port_url()})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "demo@1.0.0 is valid.",
        "Components (2):",
        "  server: Deployment {{ .Release.Name }}-server, container server",
        "  worker: Deployment {{ .Release.Name }}-worker",
        "Actions (0):",
        "The chart was not rendered here (that needs Helm, on the server): --remote checks it, as a push does.",
    ]
    report = json.loads(ctl("drivers", "validate", str(folder), "-o", "json", auth=False).stdout)
    assert set(report) == {"name", "version", "components", "actions", "problems"}
    assert report["problems"] == []


def test_validate_lists_every_problem_and_exits_1(ctl: Ctl, tmp_path: Path) -> None:
    folder = write_invalid_driver(tmp_path / "broken")
    result = ctl("drivers", "validate", str(folder), auth=False)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "broken@1.0.0 is not valid: 2 problems.",
        'driver.styrmin.yml, line 23, spec.actions[0].hook: "sometime" is not a hook; use setup, upgrade, backup or restore.',
        'driver.styrmin.yml, line 24, spec.actions[0].mode: "later" is not a mode; use pre, core or post.',
    ]
    as_yaml = ctl("drivers", "validate", str(folder), "-o", "yaml", auth=False)
    assert as_yaml.exit_code == 1
    assert [p["field"] for p in yaml.safe_load(as_yaml.stdout)["problems"]] == [
        "spec.actions[0].hook",
        "spec.actions[0].mode",
    ]
    missing = ctl("drivers", "validate", str(tmp_path / "nothing"), auth=False)
    assert missing.exit_code == 1 and "no such folder or file" in missing.stdout
    remote = ctl("drivers", "validate", str(folder), "--remote")
    assert remote.exit_code == 1 and remote.stdout == result.stdout


def test_a_chart_that_misses_a_workload_passes_offline_and_fails_on_the_server(
    ctl: Ctl, tmp_path: Path
) -> None:
    """The client has no Helm: the chart is rendered by the server, which finds the missing workload."""
    folder = write_driver(tmp_path / "demo")
    template = folder / "chart" / "templates" / "workloads.yaml"
    template.write_text(template.read_text().replace("-worker", "-renamed"))
    offline = ctl("drivers", "validate", str(folder), auth=False)
    assert offline.exit_code == 0, offline.output
    assert "--remote checks it" in offline.stdout
    remote = ctl("drivers", "validate", str(folder), "--remote")
    assert remote.exit_code == 1
    assert "renders no Deployment" in remote.stdout and "component worker" in remote.stdout


def test_push_list_and_get(ctl: Ctl, tmp_path: Path) -> None:
    name = unique("drv")
    folder = write_driver(tmp_path / "d", name=name)
    pushed = ctl("drivers", "push", str(folder))
    assert pushed.exit_code == 0, pushed.output
    assert pushed.stdout.startswith(f"Pushed {name}@1.0.0 (sha256:")
    again = ctl("drivers", "push", str(folder), "-o", "json")
    assert again.exit_code == 0 and json.loads(again.stdout)["created"] is False
    (folder / "chart" / "values.yaml").write_text("replicas: 2\n")
    changed = ctl("drivers", "push", str(folder))
    assert changed.exit_code == 1 and name in changed.stderr

    table = ctl("drivers", "list").stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "VERSION",
        "APPLICATION",
        "COMPONENTS",
        "ACTIONS",
        "PUSHED",
        "BY",
        "AGE",
    ]
    assert any(line.split()[:2] == [name, "1.0.0"] for line in table)
    listed = json.loads(ctl("drivers", "list", "-o", "json").stdout)
    assert set(listed[0]) == {
        "name", "version", "description", "checksum", "application", "components", "actions",
        "pushed_by", "pushed_at",
    }  # fmt: skip
    shown = ctl("drivers", "get", f"{name}@1.0.0")
    assert shown.exit_code == 0
    assert f"Driver:        {name}@1.0.0" in shown.stdout and "Components (2):" in shown.stdout
    assert yaml.safe_load(ctl("drivers", "get", name, "1.0.0", "-o", "yaml").stdout)["name"] == name
    assert ctl("drivers", "get", name).exit_code == 2  # no version
    missing = ctl("drivers", "get", name, "9.9.9")
    assert missing.exit_code == 1 and "error:" in missing.stderr


def test_pushing_an_invalid_driver_prints_every_problem_and_exits_1(ctl: Ctl, tmp_path: Path) -> None:
    result = ctl("drivers", "push", str(write_invalid_driver(tmp_path / "broken")))
    assert result.exit_code == 1
    assert "is not valid: 2 problems" in result.stderr
    assert result.stderr.count('"sometime" is not a hook') == 1
    assert '  driver.styrmin.yml, line 23, spec.actions[0].hook: "sometime" is not a hook' in result.stderr
    assert '  driver.styrmin.yml, line 24, spec.actions[0].mode: "later" is not a mode' in result.stderr


def test_a_read_only_user_cannot_push(ctl: Ctl, tmp_path: Path) -> None:
    from styrmin import Role

    reader = ctl.server.make_user(Role.READ_ONLY)
    result = ctl(
        "drivers",
        "push",
        str(write_driver(tmp_path / "d")),
        env={"STYRMIN_TOKEN": ctl.server.token_for(reader)},
    )
    assert result.exit_code == 1
    assert "this needs Read/write" in result.stderr


def test_the_example_driver_validates_offline_and_pushes(ctl: Ctl) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "drivers" / "shop"
    validated = ctl("drivers", "validate", str(example), auth=False)
    assert validated.exit_code == 0, validated.output
    assert validated.stdout.startswith("shop@1.0.0 is valid.")
    pushed = ctl("drivers", "push", str(example), "-o", "json")
    assert pushed.exit_code == 0, pushed.output
    driver = json.loads(pushed.stdout)["driver"]
    assert [a["name"] for a in driver["actions"]] == [
        "initialize_database",
        "upgrade",
        "back_up_database",
        "restore_database",
    ]


def test_pushing_an_invalid_driver_with_o_json_prints_the_error_document_once(
    ctl: Ctl, tmp_path: Path
) -> None:
    result = ctl("drivers", "push", str(write_invalid_driver(tmp_path / "broken")), "-o", "json")

    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "invalid_driver" and error["exit_code"] == 1
    assert error["message"] == "broken@1.0.0 is not valid: 2 problems."
    assert [line.split(", ")[1] for line in error["details"]] == ["line 23", "line 24"]
    assert result.stderr == ""
