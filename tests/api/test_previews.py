"""Previews, revision history, rollback and apply through the API, on a real database and real Helm."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from styrmin_backend.domain.manifest_diff import SECRET_CHANGED, SECRET_EARLIER, SECRET_UNCHANGED
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import SECRET_SET
from styrmin_backend.drivers import DriverReport, read_driver
from styrmin_backend.drivers.render import SECRET_CHECKSUM_ANNOTATION
from styrmin_backend.services import changes, drivers, preview, workflow
from styrmin_backend.services.principal import Principal
from styrmin_backend.store.models import ChangeRow, DeploymentRow, TaskRow
from tests.api.conftest import Stack
from tests.support.drivers import driver_folder
from tests.support.processes import python_prints

SECRET_PASSWORD = "hunter2-very-secret"


def _add_driver_with_actions(stack: Stack, version: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        package = read_driver(driver_folder(Path(scratch) / "shop", version=version, with_actions=True))
    with stack.session() as session:
        drivers.push_driver(session, package, DriverReport(), pushed_by="admin")


def _succeed(stack: Stack, task_id: int) -> None:
    """End a task as the agent would after applying it (no agent runs in these tests)."""
    with stack.session() as session:
        workflow.start_task(session, task_id)
        step = workflow.add_step(session, task_id, "Install the application")
        workflow.end_step(session, step.id)
        workflow.end_task(session, task_id)


def _create(stack: Stack, token: str, configuration: dict[str, Any] | None = None) -> None:
    body = {
        "name": "shop",
        "namespace": "shop",
        "driver": "shop",
        "driver_version": "1.0.0",
        "configuration": configuration or {},
    }
    response = stack.client.post("/api/v1/deployments", json=body, headers=stack.headers(token))
    assert response.status_code == 202, response.text
    _succeed(stack, response.json()["task"]["id"])


def _counts(stack: Stack) -> tuple[int, int, int]:
    with stack.session() as session:
        return (
            session.scalar(select(func.count()).select_from(ChangeRow)) or 0,
            session.scalar(select(func.count()).select_from(TaskRow)) or 0,
            session.scalar(select(func.max(DeploymentRow.last_revision))) or 0,
        )


def _preview(stack: Stack, token: str, body: dict[str, Any], name: str = "shop") -> dict[str, Any]:
    response = stack.client.post(
        f"/api/v1/deployments/{name}/preview", json=body, headers=stack.headers(token)
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_preview_of_an_upgrade_shows_the_new_image_in_the_deployment_diff_and_records_nothing(
    stack: Stack,
) -> None:
    _add_driver_with_actions(stack, "1.0.0")
    token = stack.token_for("admin")
    _create(stack, token)
    before = _counts(stack)

    shown = _preview(stack, token, {"type": "upgrade", "app_version": "2.0.0"})

    assert shown["refusal"] is None
    (upgrade,) = shown["changes"]
    assert [step["name"] for step in upgrade["steps"]] == ["Run the upgrade hook"]
    assert upgrade["steps"][0]["actions"] == [
        {"name": "upgrade", "description": "Stop workers, run migration, restart, verify"}
    ]
    assert {"hook": "upgrade", "mode": "pre"} in [
        {"hook": s["hook"], "mode": s["mode"]} for s in upgrade["skipped"]
    ]
    assert shown["versions_from"] == {"driver_version": "1.0.0", "app_version": "1.0.0"}
    assert shown["versions_to"] == {"driver_version": "1.0.0", "app_version": "2.0.0"}
    server = next(o for o in shown["objects"] if o["kind"] == "Deployment" and o["name"] == "shop-server")
    assert server["change"] == "changed"
    assert "-        image: example.com/shop/server:1.0.0" in server["diff"]
    assert "+        image: example.com/shop/server:2.0.0" in server["diff"]
    images = {i["component"]: i for i in shown["images"]}
    assert images["server"]["after"][0] == "example.com/shop/server:2.0.0"
    assert images["server"]["before"][0] == "example.com/shop/server:1.0.0"
    assert _counts(stack) == before


def test_a_secret_env_value_is_never_in_a_preview(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token, {"env": {"server": {"DB_PASSWORD": "old-password-value"}}})

    body = {"type": "configure", "configuration": {"env": {"server": {"DB_PASSWORD": SECRET_PASSWORD}}}}
    response = stack.client.post("/api/v1/deployments/shop/preview", json=body, headers=stack.headers(token))

    assert response.status_code == 200, response.text
    assert SECRET_PASSWORD not in response.text
    assert "old-password-value" not in response.text
    secret = next(o for o in response.json()["objects"] if o["kind"] == "Secret")
    assert secret["change"] == "changed"
    assert "<secret: changed>" in secret["diff"]
    assert response.json()["configuration_to"]["env"]["server"]["DB_PASSWORD"] == "<secret: changed>"


_CONFIG_FILE_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  app.properties: |
    db.password={{ (.Values.db | default dict).password }}
    workers={{ .Values.workers | default 1 }}
  encoded: {{ (.Values.db | default dict).password | default "" | b64enc | quote }}
  all.json: {{ toJson .Values | quote }}
"""


def test_a_secret_value_the_chart_writes_into_a_config_file_is_never_in_a_preview(stack: Stack) -> None:
    # Charts that write a password into a config file, b64enc it or toJson the values are common: the
    # preview showed it to every Read/write user, in clear and in base64.
    with tempfile.TemporaryDirectory() as scratch:
        folder = driver_folder(Path(scratch) / "shop")
        (folder / "chart" / "templates" / "config.yaml").write_text(_CONFIG_FILE_TEMPLATE)
        package = read_driver(folder)
    with stack.session() as session:
        drivers.push_driver(session, package, DriverReport(), pushed_by="admin")
    token = stack.token_for("admin")
    _create(stack, token, {"values": {"db": {"password": "old-pass-in-file"}, "workers": 2}})

    shown = _preview(
        stack,
        stack.make_user("wanda", Role.READ_WRITE),
        {
            "type": "configure",
            "configuration": {"values": {"db": {"password": SECRET_PASSWORD}, "workers": 4}},
        },
    )

    text = json.dumps(shown)
    for value in (SECRET_PASSWORD, "old-pass-in-file"):
        assert value not in text
        assert base64.b64encode(value.encode()).decode() not in text
    (config,) = [o for o in shown["objects"] if o["kind"] == "ConfigMap"]
    assert config["change"] == "changed"
    assert f"db.password={SECRET_CHANGED}" in config["diff"]
    assert "-    workers=2" in config["diff"] and "+    workers=4" in config["diff"]


def test_a_render_error_never_shows_a_secret_value(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token)

    shown = _preview(
        stack,
        token,
        {"type": "configure", "configuration": {"values": {"server": {"replicas": SECRET_PASSWORD},
                                                           "password": SECRET_PASSWORD}}},
    )  # fmt: skip

    # Helm quoted the value it could not read as a number; the value is secret elsewhere in the values.
    assert shown["render_error"].endswith("invalid literal for int() with base 10: '<redacted>'")


def _plain_checksum(secret: dict[str, str]) -> str:
    """The unkeyed digest of secret env vars that whoever reads a workload could compute per guess."""
    return hashlib.sha256(json.dumps(sorted(secret.items())).encode()).hexdigest()[:16]


def _checksum_lines(diff: str) -> list[tuple[str, str]]:
    """The diff's lines of the secret env checksum annotation: (their sign, what they show)."""
    return [(line[0], line[1:].strip()) for line in diff.splitlines() if SECRET_CHECKSUM_ANNOTATION in line]


def test_a_preview_that_keeps_the_secret_values_shows_their_checksum_unchanged(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token, {"env": {"server": {"DB_PASSWORD": SECRET_PASSWORD, "LOG_LEVEL": "debug"}}})

    kept = {"env": {"server": {"DB_PASSWORD": SECRET_SET, "LOG_LEVEL": "info"}}}
    shown = _preview(stack, token, {"type": "configure", "configuration": kept})

    objects = {(o["kind"], o["name"]): o for o in shown["objects"]}
    assert objects["Secret", "shop-styrmin-env"]["change"] == "unchanged"
    server = objects["Deployment", "shop-server"]
    assert server["change"] == "changed"
    assert "+          value: info" in server["diff"]
    # The checksum is the same: at most a line of context, shown as unchanged.
    assert _checksum_lines(server["diff"]) in (
        [],
        [(" ", f"{SECRET_CHECKSUM_ANNOTATION}: '{SECRET_UNCHANGED}'")],
    )


def test_a_preview_that_changes_a_secret_value_shows_only_that_its_checksum_changes(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token, {"env": {"server": {"DB_PASSWORD": "old-password-value"}}})

    changed = {"env": {"server": {"DB_PASSWORD": SECRET_PASSWORD}}}
    response = stack.client.post(
        "/api/v1/deployments/shop/preview",
        json={"type": "configure", "configuration": changed},
        headers=stack.headers(token),
    )

    assert response.status_code == 200, response.text
    server = next(o for o in response.json()["objects"] if o["name"] == "shop-server")
    assert _checksum_lines(server["diff"]) == [
        ("-", f"{SECRET_CHECKSUM_ANNOTATION}: '{SECRET_EARLIER}'"),
        ("+", f"{SECRET_CHECKSUM_ANNOTATION}: '{SECRET_CHANGED}'"),
    ]
    for value in ("old-password-value", SECRET_PASSWORD):
        assert _plain_checksum({"DB_PASSWORD": value}) not in response.text


def test_preview_shows_the_refusal_a_read_only_user_would_meet(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    _create(stack, stack.token_for("admin"))
    reader = stack.make_user("reader", Role.READ_ONLY)

    shown = _preview(stack, reader, {"type": "upgrade", "app_version": "2.0.0"})
    real = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0.0"}, headers=stack.headers(reader)
    )

    assert real.status_code == 403
    assert shown["refusal"]["status"] == 403
    assert shown["refusal"]["message"] == real.json()["message"]


def test_preview_of_a_driver_version_that_does_not_exist_says_what_the_request_would(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token)

    shown = _preview(stack, token, {"type": "upgrade", "driver_version": "9.9.9"})
    real = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"driver_version": "9.9.9"}, headers=stack.headers(token)
    )

    assert real.status_code == 422
    assert shown["refusal"]["message"] == real.json()["message"]
    assert "no version 9.9.9" in shown["refusal"]["message"]


def test_rollback_after_a_configuration_change_restores_it(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token, {"values": {"server": {"replicas": 2}}, "env": {"server": {"API_TOKEN": "first"}}})
    changed = stack.client.put(
        "/api/v1/deployments/shop/configuration",
        json={"values": {"server": {"replicas": 3}}, "env": {"server": {"API_TOKEN": "second"}}},
        headers=stack.headers(token),
    )
    assert changed.status_code == 202, changed.text
    _succeed(stack, changed.json()["task"]["id"])

    shown = _preview(stack, token, {"type": "rollback", "to_revision": 1})
    rolled = stack.client.post(
        "/api/v1/deployments/shop/rollback", json={"to_revision": 1}, headers=stack.headers(token)
    )

    assert [c["type"] for c in shown["changes"]] == ["configure"]
    assert shown["configuration_to"]["values"] == {"server": {"replicas": 2}}
    assert rolled.status_code == 202, rolled.text
    (change,) = rolled.json()["changes"]
    assert change["task"]["type"] == "configure"
    assert change["task"]["revision"] == 3
    with stack.session() as session:
        deployment = session.scalars(select(DeploymentRow)).one()
        assert deployment.configuration["values"] == {"server": {"replicas": 2}}
        assert deployment.configuration["env"] == {"server": {"API_TOKEN": "first"}}
    history = stack.client.get("/api/v1/deployments/shop/revisions", headers=stack.headers(token)).json()
    assert [(r["revision"], r["type"]) for r in history] == [
        (3, "configure"),
        (2, "configure"),
        (1, "create"),
    ]
    assert history[1]["configuration"]["env"]["server"]["API_TOKEN"] == "<secret: set>"
    assert "second" not in str(history)


def test_rollback_to_an_earlier_version_is_an_upgrade_with_that_revision_s_configuration(
    stack: Stack,
) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token, {"values": {"server": {"replicas": 2}}})
    upgraded = stack.client.post(
        "/api/v1/deployments/shop/upgrade", json={"app_version": "2.0.0"}, headers=stack.headers(token)
    )
    _succeed(stack, upgraded.json()["task"]["id"])

    rolled = stack.client.post(
        "/api/v1/deployments/shop/rollback", json={"to_revision": 1}, headers=stack.headers(token)
    )

    assert rolled.status_code == 202, rolled.text
    (change,) = rolled.json()["changes"]
    assert change["task"]["type"] == "upgrade"
    assert change["deployment"]["app_version"] == "1.0.0"


def test_rollback_to_a_revision_that_does_not_exist_names_the_ones_there_are(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token)

    response = stack.client.post(
        "/api/v1/deployments/shop/rollback", json={"to_revision": 7}, headers=stack.headers(token)
    )

    assert response.status_code == 404
    assert response.json()["field"] == "revision"
    assert "revisions 1 to 1" in response.json()["message"]


def test_apply_creates_then_changes_then_reports_unchanged(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    desired: dict[str, Any] = {"namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}

    def apply() -> dict[str, Any]:
        response = stack.client.post(
            "/api/v1/deployments/shop/apply", json=desired, headers=stack.headers(token)
        )
        assert response.status_code == 202, response.text
        answer: dict[str, Any] = response.json()
        return answer

    created = apply()
    _succeed(stack, created["changes"][0]["task"]["id"])
    desired["configuration"] = {"values": {"server": {"replicas": 2}}}
    changed = apply()
    unchanged = apply()

    assert created["outcome"] == "created"
    assert changed["outcome"] == "changed"
    assert [c["task"]["type"] for c in changed["changes"]] == ["configure"]
    assert unchanged == {"outcome": "unchanged", "changes": []}


def test_apply_of_a_deployment_s_own_answer_is_unchanged(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    token = stack.token_for("admin")
    _create(stack, token, {"env": {"server": {"DB_PASSWORD": SECRET_PASSWORD}}})
    shown = stack.client.get("/api/v1/deployments/shop", headers=stack.headers(token)).json()
    desired = {
        key: shown[key] for key in ("namespace", "driver", "driver_version", "app_version", "configuration")
    }

    response = stack.client.post("/api/v1/deployments/shop/apply", json=desired, headers=stack.headers(token))

    assert response.status_code == 202, response.text
    assert response.json()["outcome"] == "unchanged"


def test_a_server_renders_previews_without_loading_helms_library(tmp_path: Path) -> None:
    """The server renders charts in a process of its own, so it never holds Helm's Go library (about
    70 MB once loaded) itself: only an agent, which applies charts, loads it."""
    check = (
        "import sys\n"
        "from pathlib import Path\n"
        "from styrmin_backend.store.db import make_engine\n"
        "from styrmin_backend.store.migrate import upgrade_database\n"
        "from tests.api.conftest import make_stack\n"
        "from tests.api.test_previews import _add_driver_with_actions, _create, _preview\n"
        f"engine = make_engine({f'sqlite:///{tmp_path}/styrmin.db'!r})\n"
        "upgrade_database(engine)\n"
        f"stack = make_stack(engine, Path({str(tmp_path / 'data')!r}))\n"
        "_add_driver_with_actions(stack, '1.0.0')\n"
        "token = stack.token_for('admin')\n"
        "_create(stack, token)\n"
        "shown = _preview(stack, token, {'type': 'upgrade', 'app_version': '2.0.0'})\n"
        "print(sorted({o['change'] for o in shown['objects']}), 'helm_python' in sys.modules)\n"
    )
    assert python_prints(check).splitlines()[-1] == "['changed'] False"


def test_a_preview_on_sqlite_waits_its_turn_when_another_connection_writes(
    stack: Stack, shop_admin: dict[str, str]
) -> None:
    """The preview's savepoint reads, then records the change: on SQLite it holds the write lock from
    its start, so a write another connection commits meanwhile cannot make SQLite refuse the
    preview's own write ("database is locked", a 503 on the review page while an agent reported)."""
    if stack.engine.dialect.name != "sqlite":
        pytest.skip("SQLite's snapshots: PostgreSQL's transactions wait on row locks instead")
    database = stack.engine.url.database
    assert database is not None
    other_writes: list[str] = []

    with stack.session() as session:
        by = Principal(
            user_id=1, username="admin", role=Role.ADMIN, is_builtin=False, token_id=0, token_kind="session"
        )

        def record() -> list[changes.Recorded]:
            session.execute(select(DeploymentRow.id)).all()  # the savepoint's snapshot is taken
            print("DBG in_txn", session.connection().connection.dbapi_connection.in_transaction)
            other = sqlite3.connect(database, timeout=0.2)
            try:
                other.execute(
                    "UPDATE deployments SET namespace = 'elsewhere'"
                )  # another writer changes a row
                other.commit()
                other_writes.append("committed")
            except sqlite3.OperationalError as error:
                other_writes.append(str(error))
            finally:
                other.close()
            return [
                changes.upgrade_deployment(session, "shop", by=by, app_version="2.0.0", driver_version=None)
            ]

        planned = preview.plan_preview(session, by=by, name="shop", record=record)

    assert planned.refusal is None and [c.type.value for c in planned.changes] == ["upgrade"]
    assert other_writes == ["database is locked"]  # it waited for the preview, which held the lock
