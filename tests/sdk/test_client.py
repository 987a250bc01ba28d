"""The sync SDK against a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

import tarfile
from io import BytesIO
from pathlib import Path

import pytest

import styrmin
from styrmin import (
    AuthenticationError,
    Client,
    ConfigurationError,
    ConflictError,
    DeploymentStatus,
    ForbiddenError,
    InvalidDriverError,
    NotFoundError,
    Role,
    Task,
    TaskFailedError,
    TaskStatus,
    TaskType,
    ValidationError,
    WaitTimeoutError,
)

from .server import (
    ADMIN_PASSWORD,
    USER_PASSWORD,
    LiveServer,
    in_background,
    run_task,
    unique,
    write_driver,
    write_invalid_driver,
)


def _deployment(admin: Client, **kwargs: object) -> str:
    name = unique("shop")
    admin.deployments.create(name, namespace=name, driver="demo", driver_version="1.0.0", **kwargs)  # type: ignore[arg-type]
    return name


# --- configuration and auth --------------------------------------------------------------------


def test_the_client_reads_styrmin_url_and_styrmin_token(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STYRMIN_URL", live_server.url + "/")
    monkeypatch.setenv("STYRMIN_TOKEN", live_server.admin_token())
    with Client() as client:
        assert client.url == live_server.url
        me = client.whoami()
    assert (me.username, me.role, me.builtin) == ("admin", Role.ADMIN, False)


def test_without_a_url_the_client_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STYRMIN_URL", raising=False)
    with pytest.raises(ConfigurationError, match="STYRMIN_URL"):
        Client()
    with pytest.raises(ConfigurationError, match="http"):
        Client("styrmin.example.com")


def test_login_uses_the_new_token_and_logout_revokes_it(live_server: LiveServer) -> None:
    with Client(live_server.url, "") as client:
        issued = client.login("admin", ADMIN_PASSWORD, token_name="sdk-test", expires_in_seconds=3600)
        assert client.token == issued.token
        assert client.whoami().username == "admin"
        client.logout()
        assert client.token is None
    with Client(live_server.url, issued.token) as stale, pytest.raises(AuthenticationError) as caught:
        stale.whoami()
    assert caught.value.status == 401
    assert "revoked" in caught.value.message


def test_a_wrong_password_is_an_authentication_error_with_the_servers_message(
    live_server: LiveServer,
) -> None:
    with Client(live_server.url, "") as client, pytest.raises(AuthenticationError) as caught:
        client.login("admin", "not-the-password")
    assert caught.value.message == "The user name or password is wrong."
    assert str(caught.value) == "The user name or password is wrong. (HTTP 401)"


# --- drivers -----------------------------------------------------------------------------------


def test_push_stores_a_driver_once_and_refuses_changed_content(admin: Client, tmp_path: Path) -> None:
    name = unique("drv")
    folder = write_driver(tmp_path / "d", name=name)
    first = admin.drivers.push(folder)
    assert first.created and (first.driver.name, first.driver.version) == (name, "1.0.0")
    assert [c.name for c in first.driver.components] == ["server", "worker"]
    again = admin.drivers.push(folder)
    assert not again.created and again.driver.checksum == first.driver.checksum
    (folder / "chart" / "values.yaml").write_text("replicas: 2\n")
    with pytest.raises(ConflictError) as caught:
        admin.drivers.push(folder)
    assert caught.value.status == 409
    assert f"{name}" in caught.value.message
    assert admin.drivers.get(name, "1.0.0").checksum == first.driver.checksum
    assert any(d.name == name for d in admin.drivers.list())
    archive = admin.drivers.download(name, "1.0.0")
    with tarfile.open(fileobj=BytesIO(archive), mode="r:gz") as tar:
        assert "driver.styrmin.yml" in [m.name.split("/", 1)[-1] for m in tar.getmembers()]


def test_an_invalid_push_lists_every_problem(admin: Client, tmp_path: Path) -> None:
    folder = write_invalid_driver(tmp_path / "broken")
    with pytest.raises(ValidationError) as caught:
        admin.drivers.push(folder)
    assert caught.value.status == 422
    assert caught.value.field == "driver"
    assert len(caught.value.errors) >= 2
    assert any("later" in e.message for e in caught.value.errors)
    report = admin.drivers.validate(folder)
    assert not report.valid and len(report.problems) == len(caught.value.errors)
    assert report.problems[0].file == "driver.styrmin.yml"
    valid = admin.drivers.validate(write_driver(tmp_path / "ok"))
    assert valid.valid and [c.name for c in valid.components] == ["server", "worker"]


def test_a_missing_path_or_unknown_driver_is_reported(admin: Client, tmp_path: Path) -> None:
    with pytest.raises(InvalidDriverError, match="no such folder or file"):
        admin.drivers.push(tmp_path / "nothing-here")
    with pytest.raises(NotFoundError) as caught:
        admin.drivers.get("nope", "9.9.9")
    assert caught.value.status == 404 and caught.value.message


# --- deployments -------------------------------------------------------------------------------


def test_deployment_changes_record_tasks(admin: Client) -> None:
    name = unique("shop")
    created = admin.deployments.create(
        name,
        namespace=name,
        driver="demo",
        driver_version="1.0.0",
        configuration={"values": {"replicas": 2}, "images": {"server": "example.com/s:{{ app.version }}"}},
    )
    assert created.task is not None and created.task.type == TaskType.CREATE
    assert created.task.status == TaskStatus.PENDING and created.task.requested_by == "admin"
    assert created.deployment.configuration.values == {"replicas": 2}
    assert created.deployment.app_version == "1.0.0"

    upgraded = admin.deployments.upgrade(name, app_version="2.0.0", driver_version="2.0.0")
    assert upgraded.task is not None and upgraded.task.type == TaskType.UPGRADE
    assert (upgraded.deployment.app_version, upgraded.deployment.driver_version) == ("2.0.0", "2.0.0")
    # The same versions again while that upgrade is pending: a conflict naming the task to wait for.
    with pytest.raises(styrmin.ConflictError, match=f"Task #{upgraded.task.id} \\(upgrade\\)"):
        admin.deployments.upgrade(name, app_version="2.0.0")

    configured = admin.deployments.configure(
        name, styrmin.Configuration(values={"replicas": 3}, env={"worker": {"LEVEL": "debug"}})
    )
    assert configured.task is not None and configured.task.type == TaskType.CONFIGURE
    assert admin.deployments.get(name).configuration.env == {"worker": {"LEVEL": "debug"}}

    stopped = admin.deployments.stop(name, ["worker"])
    assert stopped.deployment.stopped_components == ["worker"]
    started = admin.deployments.start(name, ["worker"])
    assert started.deployment.stopped_components == []
    deleted = admin.deployments.delete(name)
    assert deleted.task is not None and deleted.task.type == TaskType.DELETE
    assert deleted.deployment.status == DeploymentStatus.DELETING
    revisions = sorted(t.revision or 0 for t in admin.tasks.iter(deployment=name))
    assert revisions == [1, 2, 3, 4, 5, 6]
    assert name in [d.name for d in admin.deployments.list()]


def test_change_errors_are_typed_with_the_field_to_fix(admin: Client, live_server: LiveServer) -> None:
    name = _deployment(admin)
    with pytest.raises(ConflictError) as conflict:
        admin.deployments.create(name, namespace=name, driver="demo", driver_version="1.0.0")
    assert conflict.value.field == "name"
    with pytest.raises(ValidationError) as invalid:
        admin.deployments.stop(name, ["nope"])
    assert invalid.value.field == "components"
    with pytest.raises(ValidationError) as bad_image:
        admin.deployments.configure(name, {"images": {"db": "postgres:16"}})
    assert bad_image.value.field == "configuration.images"
    with pytest.raises(NotFoundError):
        admin.deployments.get(unique("missing"))
    with pytest.raises(ConfigurationError):
        admin.deployments.upgrade(name)
    # Bad arguments are the documented ConfigurationError, and nothing is sent (were: a 307 "not what
    # Styrmin answers", a bare "Not Found", pydantic's own ValidationError and a TypeError).
    for bad_name in ("", "..", "a/b"):
        with pytest.raises(ConfigurationError, match="cannot name anything"):
            admin.deployments.get(bad_name)
    with pytest.raises(ConfigurationError, match="The configuration's values: "):
        admin.deployments.configure(name, {"values": 3})
    with pytest.raises(ConfigurationError, match="not int"):
        admin.deployments.create(
            unique("x"),
            namespace="x",
            driver="demo",
            driver_version="1.0.0",
            configuration=42,  # type: ignore[arg-type]
        )
    reader = live_server.make_user(Role.READ_ONLY)
    with Client(live_server.url, live_server.token_for(reader)) as client:
        with pytest.raises(ForbiddenError) as caught:
            client.deployments.delete(name)
        assert caught.value.status == 403 and "Read/write" in caught.value.message
        assert client.deployments.get(name).name == name  # reading is allowed


# --- tasks -------------------------------------------------------------------------------------


def test_task_list_filters_and_pages(admin: Client) -> None:
    name = _deployment(admin)
    for _ in range(3):
        admin.deployments.stop(name, ["server"])
    first = admin.tasks.list(deployment=name, limit=2)
    assert [t.type for t in first.items] == [TaskType.STOP, TaskType.STOP]
    assert first.next_before is not None
    rest = admin.tasks.list(deployment=name, limit=2, before=first.next_before)
    assert [t.type for t in rest.items] == [TaskType.STOP, TaskType.CREATE]
    everything = list(admin.tasks.iter(deployment=name, page_size=1))
    assert [t.id for t in everything] == [t.id for t in first.items + rest.items]
    assert all(t.type == TaskType.CREATE for t in admin.tasks.list(deployment=name, type="create").items)
    assert admin.tasks.list(deployment=name, status=TaskStatus.FAILED).items == []


def test_a_task_shows_steps_output_notes_and_the_tasks_its_step_started(
    admin: Client, live_server: LiveServer
) -> None:
    name = _deployment(admin)
    upgrade = admin.deployments.upgrade(name, app_version="2.0.0")
    assert upgrade.task is not None
    steps = run_task(
        live_server, upgrade.task.id, fail=True, output="line 1\nline 2\n", truncated=True, note="n1"
    )
    with Client(live_server.url, live_server.actions_token(upgrade.task.id)) as actions:
        child = actions.deployments.stop(name, ["worker"], started_by_step=steps["apply"])
    assert child.task is not None and child.task.requested_by == "styrmin-actions"
    run_task(live_server, child.task.id)

    task = admin.tasks.get(upgrade.task.id)
    assert isinstance(task, Task) and task.status == TaskStatus.FAILED and task.ended
    assert task.error == "Applying the workloads failed."
    render, apply = task.steps
    assert (render.name, render.status, render.position) == ("Render the chart", TaskStatus.SUCCEEDED, 0)
    assert apply.error == "Job demo-apply failed with exit code 3."
    assert (apply.output_tail, apply.output_truncated, apply.notes) == ("line 1\nline 2\n", True, ["n1"])
    [started] = apply.started_tasks
    assert (started.id, started.type, started.status) == (child.task.id, TaskType.STOP, TaskStatus.SUCCEEDED)
    assert started.result == {"rolled_out": ["server", "worker"], "started_tasks": []}
    assert apply.duration is not None

    linked = admin.tasks.get(child.task.id)
    assert linked.started_by is not None
    assert (linked.started_by.task_id, linked.started_by.step_name) == (
        upgrade.task.id,
        "Apply the workloads",
    )
    assert linked.parent_task_id == upgrade.task.id


def test_wait_reports_progress_until_the_task_ends(admin: Client, live_server: LiveServer) -> None:
    name = _deployment(admin)
    change = admin.deployments.stop(name, ["server"])
    assert change.task is not None
    seen: list[Task] = []
    worker = in_background(run_task, live_server, change.task.id, pause=0.3)
    task = admin.tasks.wait(change.task.id, on_progress=seen.append, interval=0.05, timeout=30)
    worker.join()
    assert task.status == TaskStatus.SUCCEEDED and task.result is not None
    assert seen[0].status == TaskStatus.PENDING and seen[-1] == task
    assert any(t.status == TaskStatus.RUNNING for t in seen)
    assert len({len(t.steps) for t in seen}) >= 2  # steps appeared while waiting


def test_wait_can_raise_on_failure_and_gives_up_after_its_timeout(
    admin: Client, live_server: LiveServer
) -> None:
    name = _deployment(admin)
    pending = admin.deployments.stop(name, ["server"]).task
    assert pending is not None
    with pytest.raises(WaitTimeoutError) as timeout:
        admin.tasks.wait(pending.id, interval=0.05, timeout=0.3)
    assert isinstance(timeout.value.task, Task) and timeout.value.task.status == TaskStatus.PENDING
    run_task(live_server, pending.id, fail=True)
    assert admin.tasks.wait(pending.id).status == TaskStatus.FAILED
    with pytest.raises(TaskFailedError) as failed:
        admin.tasks.wait(pending.id, raise_on_failure=True)
    assert "Applying the workloads failed." in failed.value.message


def test_waiting_for_a_task_that_does_not_exist_fails(admin: Client) -> None:
    with pytest.raises(NotFoundError):
        admin.tasks.wait(987654321, interval=0.05)


# --- users -------------------------------------------------------------------------------------


def test_users_are_managed_by_administrators(admin: Client, live_server: LiveServer) -> None:
    username = unique("alice")
    user = admin.users.create(username, role=Role.READ_WRITE, password=USER_PASSWORD)
    assert (user.role, user.active, user.builtin, user.has_password) == (Role.READ_WRITE, True, False, True)
    assert admin.users.set_role(username, "read-only").role == Role.READ_ONLY
    assert {u.username for u in admin.users.list()} >= {"admin", "styrmin-actions", username}
    with Client(live_server.url, "") as alice:
        alice.login(username, USER_PASSWORD)
        assert alice.whoami().role == Role.READ_ONLY
        assert not admin.users.deactivate(username).active
        with pytest.raises(AuthenticationError):
            alice.whoami()
        assert admin.users.activate(username).active
        assert alice.whoami().username == username
        with pytest.raises(ForbiddenError):
            alice.users.create(unique("bob"), role=Role.ADMIN, password=USER_PASSWORD)
    admin.users.set_password(username, "another-long-password")
    with Client(live_server.url, "") as again:
        again.login(username, "another-long-password")
    reset = admin.users.reset_password(username)
    assert reset.username == username and reset.password
    with pytest.raises(ForbiddenError):
        admin.users.set_password("styrmin-actions", "whatever-long-password")
    assert admin.users.get(username).role == Role.READ_ONLY
