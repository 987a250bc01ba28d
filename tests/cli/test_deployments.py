"""`styrminctl deployments`: every change, its configuration options, and the stable -o fields."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.sdk.server import unique

from .conftest import Ctl

DEPLOYMENT_FIELDS = {
    "id", "name", "namespace", "cluster", "driver", "driver_version", "app_version", "running_app_version",
    "running_driver_version", "configuration", "stopped_components", "status", "revision", "created_at",
    "updated_at",
}  # fmt: skip


def test_create_with_configuration_then_list_and_get(ctl: Ctl, tmp_path: Path) -> None:
    name = unique("shop")
    values = tmp_path / "values.yaml"
    values.write_text("replicas: 2\nserver:\n  port: 8080\n")
    created = ctl(
        "deployments", "create", name, "--driver", "demo", "--driver-version", "1.0.0", "-n", "shops",
        "--values", str(values), "--set", "server.port=9090", "--set", "debug=true",
        "--image", "server=example.com/shop:{{ app.version }}", "--env", "worker.LEVEL=debug", "-o", "json",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    change = json.loads(created.stdout)
    assert set(change) == {"deployment", "task"}
    assert set(change["deployment"]) >= DEPLOYMENT_FIELDS
    assert change["deployment"]["namespace"] == "shops"
    assert change["deployment"]["configuration"] == {
        "values": {"replicas": 2, "server": {"port": 9090}, "debug": True},
        "images": {"server": "example.com/shop:{{ app.version }}"},
        "env": {"worker": {"LEVEL": "debug"}},
    }
    assert (change["task"]["type"], change["task"]["status"]) == ("create", "pending")

    human = ctl("deployments", "create", unique("shop"), "--driver", "demo@1.0.0")
    assert human.exit_code == 0
    assert "revision 1, task" in human.stdout and "Follow it with: styrminctl tasks wait" in human.stdout

    rows = ctl("deployments", "list").stdout.splitlines()
    assert rows[0].split()[:3] == ["NAME", "NAMESPACE", "DRIVER"]
    assert any(row.split()[:4] == [name, "shops", "demo@1.0.0", "1.0.0"] for row in rows)
    assert name in [d["name"] for d in json.loads(ctl("deployments", "list", "-o", "json").stdout)]

    shown = ctl("deployments", "get", name)
    assert shown.exit_code == 0
    assert f"Name:          {name}" in shown.stdout
    assert "Driver:        demo@1.0.0" in shown.stdout
    assert "Recent tasks:" in shown.stdout and "create" in shown.stdout
    assert yaml.safe_load(ctl("deployments", "get", name, "-o", "yaml").stdout)["configuration"]["env"] == {
        "worker": {"LEVEL": "debug"}
    }


def test_set_changes_the_current_configuration(ctl: Ctl, tmp_path: Path) -> None:
    name = unique("shop")
    ctl("deployments", "create", name, "--driver", "demo@1.0.0", "--set", "a.b=1", "--set", "keep=yes",
        "--image", "server=img:1", "--env", "server.A=1", "--env", "server.B=2")  # fmt: skip
    result = ctl(
        "deployments", "set", name, "--set", "a.c=[1, 2]", "--unset", "keep", "--unset-image", "server",
        "--image", "worker=img:2", "--unset-env", "server.A", "--env", "worker.C=3", "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    change = json.loads(result.stdout)
    assert change["task"]["type"] == "configure"
    assert change["deployment"]["configuration"] == {
        "values": {"a": {"b": 1, "c": [1, 2]}},
        "images": {"worker": "img:2"},
        "env": {"server": {"B": "2"}, "worker": {"C": "3"}},
    }
    whole = tmp_path / "configuration.yaml"
    whole.write_text("values: {x: 1}\n")
    replaced = json.loads(ctl("deployments", "set", name, "-f", str(whole), "-o", "json").stdout)
    assert replaced["deployment"]["configuration"] == {"values": {"x": 1}, "images": {}, "env": {}}
    assert ctl("deployments", "set", name).exit_code == 2  # nothing to change
    assert ctl("deployments", "set", name, "--env", "novalue").exit_code == 2
    bad = ctl("deployments", "set", name, "--image", "db=postgres:16")
    assert bad.exit_code == 1
    assert "configuration.images" in bad.stderr and "has no component 'db'" in bad.stderr


def test_upgrade_stop_start_and_delete(ctl: Ctl) -> None:
    name = ctl.deployment()
    upgraded = ctl("deployments", "upgrade", name, "--app-version", "2.0.0", "--driver-version", "2.0.0")
    assert upgraded.exit_code == 0, upgraded.output
    assert f"Upgrading {name}: revision 2, task" in upgraded.stdout
    # Asking again while that upgrade waits for an agent says which task to wait for.
    same = ctl("deployments", "upgrade", name, "--app-version", "2.0.0", "-o", "json")
    assert same.exit_code == 1 and same.stderr == ""  # under -o json the error is JSON, on stdout
    error = json.loads(same.stdout)["error"]
    assert error["code"] == "conflict" and "is already being changed to application 2.0.0" in error["message"]
    assert any("Wait for it to end" in line for line in [error["message"], *error.get("details", [])])
    assert ctl("deployments", "upgrade", name).exit_code == 2  # neither version given

    stopped = json.loads(ctl("deployments", "stop", name, "worker", "-o", "json").stdout)
    assert stopped["deployment"]["stopped_components"] == ["worker"] and stopped["task"]["type"] == "stop"
    everything = json.loads(ctl("deployments", "stop", name, "--all", "-o", "json").stdout)
    assert everything["deployment"]["stopped_components"] == ["server", "worker"]
    started = json.loads(ctl("deployments", "start", name, "server", "worker", "-o", "json").stdout)
    assert started["deployment"]["stopped_components"] == []
    assert ctl("deployments", "stop", name).exit_code == 2  # no components
    unknown = ctl("deployments", "stop", name, "nope")
    assert unknown.exit_code == 1 and "error:" in unknown.stderr

    deleted = ctl("deployments", "delete", name, "--yes")
    assert deleted.exit_code == 0 and f"Deleting {name}" in deleted.stdout
    again = ctl("deployments", "upgrade", name, "--app-version", "3.0.0")
    assert again.exit_code == 1 and "being deleted" in again.stderr


def test_errors_of_the_server_exit_1_and_usage_errors_exit_2(ctl: Ctl) -> None:
    missing = ctl("deployments", "get", unique("missing"))
    assert missing.exit_code == 1 and missing.stderr.startswith("error: ")
    taken = ctl.deployment()
    conflict = ctl("deployments", "create", taken, "--driver", "demo@1.0.0")
    assert conflict.exit_code == 1
    assert ctl("deployments", "create", unique("x")).exit_code == 2  # --driver is required
    assert ctl("deployments", "list", "-o", "xml").exit_code == 2
    assert ctl("deployments", "frobnicate").exit_code == 2
    from styrmin import Role

    reader = ctl.server.make_user(Role.READ_ONLY)
    refused = ctl(
        "deployments", "delete", taken, "--yes", env={"STYRMIN_TOKEN": ctl.server.token_for(reader)}
    )
    assert refused.exit_code == 1 and "has the role Read-only; this needs Read/write" in refused.stderr


def test_naming_components_together_with_all_is_a_usage_error(ctl: Ctl) -> None:
    name = ctl.deployment()

    stop = ctl("deployments", "stop", name, "server", "--all")
    start = ctl("deployments", "start", name, "worker", "--all", "-o", "json")
    shown = json.loads(ctl("deployments", "get", name, "-o", "json").stdout)

    assert stop.exit_code == 2
    assert "Name the components (server) or pass --all, not both" in stop.stderr
    assert start.exit_code == 2
    assert json.loads(start.stdout)["error"]["code"] == "usage"
    assert shown["stopped_components"] == [] and shown["revision"] == 1  # nothing was stopped


def test_set_refuses_what_it_would_otherwise_store_as_something_else(ctl: Ctl) -> None:
    name = ctl.deployment()
    refused = {
        "a=[1,": '--set "a=[1,": the value "[1," is not valid YAML',
        "a..b=3": '--set "a..b=3": the path "a..b" has an empty key',
        "a=1,b=2": '--set "a=1,b=2": the value holds a comma',
        "list[0]=x": '--set "list[0]=x": "list[0]" indexes a list',
    }

    results = {item: ctl("deployments", "set", name, "--set", item) for item in refused}
    shown = json.loads(ctl("deployments", "get", name, "-o", "json").stdout)

    for item, message in refused.items():
        assert results[item].exit_code == 2, (item, results[item].output)
        assert message in results[item].stderr, (item, results[item].stderr)
    assert shown["revision"] == 1 and shown["configuration"]["values"] == {}


def test_set_takes_helm_escapes_and_quoted_text(ctl: Ctl) -> None:
    name = ctl.deployment()

    result = ctl(
        "deployments", "set", name, "--set", r"hosts=a.example\,b.example", "--set", 'quoted="x,y"',
        "--set", r"nodeSelector.kubernetes\.io/os=linux", "--set", "ports=[80, 443]", "-o", "json",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deployment"]["configuration"]["values"] == {
        "hosts": "a.example,b.example",
        "quoted": "x,y",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "ports": [80, 443],
    }
