"""The UI's form endpoints on both engines: CSRF, roles, field errors, masking and pagination."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest

from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import SECRET_SET
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.protocol import ComponentStatus
from styrmin_backend.services import agents, auth, changes, tasks
from tests.api.conftest import ADMIN_PASSWORD, USER_PASSWORD, Stack
from tests.web.conftest import Progress, login_client, login_form_token, make_user


def _task_count(stack: Stack) -> int:
    with stack.session() as session:
        return len(tasks.list_tasks(session, limit=500).items)


def test_pages_ask_to_log_in_first(web: Stack) -> None:
    response = web.client.get("/deployments/shop", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/deployments/shop"


def test_login_sets_an_httponly_samesite_session_cookie(web: Stack) -> None:
    response = web.client.post(
        "/login",
        data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": login_form_token(web.client)},
        follow_redirects=False,
    )
    cookie = next(c for c in response.headers.get_list("set-cookie") if c.startswith("styrmin_session="))
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie


def test_login_without_the_forms_token_is_refused(web: Stack) -> None:
    response = web.client.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD})
    assert response.status_code == 401
    assert "The login form expired" in response.text
    assert "styrmin_session" not in response.cookies


def test_login_as_styrmin_actions_is_refused_beside_the_user_name(web: Stack) -> None:
    response = web.client.post(
        "/login",
        data={
            "username": ACTIONS_USERNAME,
            "password": "whatever-it-is",
            "csrf_token": login_form_token(web.client),
        },
    )
    assert response.status_code == 401
    assert 'id="username-error"' in response.text
    assert f"No one can log in as {ACTIONS_USERNAME}" in response.text


def test_a_form_post_without_the_sessions_csrf_token_changes_nothing(web: Stack) -> None:
    Progress(web).create("shop")
    login_client(web.client, "admin", ADMIN_PASSWORD)
    before = _task_count(web)
    for token in ("", "forged"):
        response = web.client.post(
            "/deployments/shop/stop", data={"csrf_token": token, "component": "server", "confirmed": "yes"}
        )
        assert response.status_code == 403
        assert "reload the page" in response.text
    assert _task_count(web) == before


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/new-deployment", {"name": "other", "namespace": "shop", "driver": "shop@1.0.0"}),
        (
            "/deployments/shop/upgrade",
            {"app_version": "2.0.0", "driver_version": "1.0.0", "confirmed": "yes"},
        ),
        ("/deployments/shop/configure", {"values": "a: 1", "confirmed": "yes"}),
        ("/deployments/shop/stop", {"component": "server", "confirmed": "yes"}),
        ("/deployments/shop/start", {"component": "server", "confirmed": "yes"}),
        ("/deployments/shop/delete", {"confirmed": "yes"}),
        ("/users", {"username": "mallory", "role": "admin", "password": "long-enough-1"}),
        ("/users/reader/role", {"role": "admin"}),
        ("/users/admin/active", {"active": "no"}),
        ("/users/admin/password", {"password": "taken-over-1"}),
    ],
)
def test_read_only_form_posts_are_refused_by_the_server(web: Stack, path: str, data: dict[str, str]) -> None:
    Progress(web).create("shop")
    make_user(web, "reader", Role.READ_ONLY)
    csrf = login_client(web.client, "reader", USER_PASSWORD)
    before = _task_count(web)
    response = web.client.post(path, data={**data, "csrf_token": csrf}, follow_redirects=False)
    assert response.status_code == 403, response.text
    assert "Read-only" in response.text
    assert _task_count(web) == before
    with web.session() as session:
        from styrmin_backend.services import users

        assert users.get_user(session, "reader").role == Role.READ_ONLY.value
        assert users.get_user(session, "admin").is_active


def test_read_write_users_cannot_manage_users(web: Stack) -> None:
    make_user(web, "operator", Role.READ_WRITE)
    csrf = login_client(web.client, "operator", USER_PASSWORD)
    response = web.client.post("/users/operator/role", data={"role": "admin", "csrf_token": csrf})
    assert response.status_code == 403
    assert "this needs Admin" in response.text


def test_create_form_shows_each_error_beside_its_field(web: Stack) -> None:
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    response = web.client.post(
        "/new-deployment",
        data={
            "csrf_token": csrf,
            "name": "Shop_1",
            "namespace": "shop",
            "driver": "shop@1.0.0",
            "values": "a: [1",
            "env.server": "1BAD=x",
        },
    )
    assert response.status_code == 422
    assert re.search(r'id="values-error">.*not valid YAML', response.text)
    assert re.search(r'id="env-server-error">.*Line 1 is not NAME=value', response.text)
    # The name is checked by the service once the form itself reads well.
    response = web.client.post(
        "/new-deployment",
        data={"csrf_token": csrf, "name": "Shop_1", "namespace": "shop", "driver": "shop@1.0.0"},
    )
    assert response.status_code == 422
    assert re.search(r'id="name-error">.*not a valid deployment name', response.text)
    assert 'aria-describedby="name-hint name-error" aria-invalid="true"' in response.text
    assert _task_count(web) == 0


def test_upgrade_asks_for_confirmation_before_recording_anything(web: Stack) -> None:
    Progress(web).create("shop")
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    before = _task_count(web)
    review = web.client.post(
        "/deployments/shop/upgrade",
        data={"csrf_token": csrf, "app_version": "1.1.0", "driver_version": "1.1.0"},
    )
    assert review.status_code == 200
    assert "Application version: 1.0.0 → 1.1.0" in review.text
    assert 'name="confirmed" value="yes"' in review.text
    assert _task_count(web) == before
    done = web.client.post(
        "/deployments/shop/upgrade",
        data={"csrf_token": csrf, "app_version": "1.1.0", "driver_version": "1.1.0", "confirmed": "yes"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert _task_count(web) == before + 1


@pytest.mark.parametrize("version", ["1.x!; rm", "1.0.0; echo hi", "2.0.0+build.1", "1.0-"])
def test_an_application_version_no_tag_or_label_takes_is_refused_beside_its_field(
    web: Stack, version: str
) -> None:
    # Taken by the forms before: the preview offered an image tagged "1.x!; rm", and a create was
    # recorded that failed at Helm ("metadata.labels: Invalid value").
    Progress(web).create("shop")
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    before = _task_count(web)
    upgrade = web.client.post(
        "/deployments/shop/upgrade",
        data={"csrf_token": csrf, "app_version": version, "driver_version": "1.0.0"},
    )
    create = web.client.post(
        "/new-deployment",
        data={"csrf_token": csrf, "name": "shop-2", "namespace": "shop", "driver": "shop@1.0.0",
              "app_version": version},
    )  # fmt: skip
    for page in (upgrade, create):
        assert page.status_code == 422, page.text
        assert re.search(
            r'id="app_version-error">.*is not a valid application version', html.unescape(page.text)
        )
    assert _task_count(web) == before


def test_upgrade_to_the_current_versions_says_no_task_was_started(web: Stack) -> None:
    progress = Progress(web)
    progress.finish_create(progress.create("shop"))
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    response = web.client.post(
        "/deployments/shop/upgrade",
        data={"csrf_token": csrf, "app_version": "1.0.0", "driver_version": "1.0.0"},
    )
    assert "already runs these versions, so no task was started" in response.text


def test_upgrade_to_the_versions_of_a_pending_upgrade_says_to_wait_for_it(web: Stack) -> None:
    progress = Progress(web)
    progress.finish_create(progress.create("shop"))
    pending = progress.upgrade("shop", "1.1.0")
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    response = web.client.post(
        "/deployments/shop/upgrade",
        data={"csrf_token": csrf, "app_version": "1.1.0", "driver_version": "1.0.0"},
    )
    assert response.status_code == 422
    assert f"Task #{pending} (upgrade) is waiting for an agent. Wait for it to end" in response.text


def test_deployment_page_masks_secret_looking_values(web: Stack) -> None:
    configuration = DeploymentConfiguration(
        values={
            "database": {"password": "hunter2-value", "url": "postgres://shop:s3cr3t-pw@db/shop"},
            "replicas": 2,
        },
        images={"server": "registry.local:5000/shop/server:{{ app.version }}"},
        env={"server": {"API_TOKEN": "tok-abcdef", "LOG_LEVEL": "debug"}},
    )
    Progress(web).create("shop", configuration)
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/deployments/shop").text
    for secret in ("hunter2-value", "s3cr3t-pw", "tok-abcdef"):
        assert secret not in page
    assert SECRET_SET in page or "&lt;secret: set&gt;" in page
    assert "LOG_LEVEL=debug" in page
    assert "replicas: 2" in page
    assert "registry.local:5000/shop/server:{{ app.version }}" in page


def test_task_history_is_paginated(web: Stack) -> None:
    progress = Progress(web)
    progress.create("shop")
    for version in range(24):
        progress.upgrade("shop", f"2.0.{version}")
    login_client(web.client, "admin", ADMIN_PASSWORD)
    first = web.client.get("/deployments/shop").text
    older = re.search(r'href="/deployments/shop\?before=(\d+)">Older tasks', first)
    assert older
    second = web.client.get(f"/deployments/shop?before={older.group(1)}").text
    assert "Create #1" in second
    assert "Create #1" not in first.split("Task history")[1]
    assert "Newest tasks" in second


def test_users_page_lists_styrmin_actions_without_password_controls(web: Stack) -> None:
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/users").text
    row = re.search(rf'<tr data-user="{ACTIONS_USERNAME}">(.*?)</tr>', page, re.DOTALL)
    assert row
    assert "Built-in" in row.group(1)
    assert 'type="password"' not in row.group(1)
    assert "/password" not in row.group(1)


def test_setting_styrmin_actions_password_by_a_forged_post_is_refused(web: Stack) -> None:
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    response = web.client.post(
        f"/users/{ACTIONS_USERNAME}/password", data={"csrf_token": csrf, "password": "a-long-password"}
    )
    assert response.status_code == 403
    assert "refuses to set or reset its password" in response.text


def test_deployment_page_shows_each_components_replicas_and_images(web: Stack) -> None:
    configuration = DeploymentConfiguration(
        values={"taskWorker": {"replicas": 3}},
        images={"server": "registry.local:5000/shop/server:{{ app.version }}-debug"},
        env={},
    )
    Progress(web).create("shop", configuration)
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/deployments/shop").text
    server = re.search(r'<th scope="row">server</th>(.*?)</tr>', page, re.DOTALL)
    worker = re.search(r'<th scope="row">task-worker</th>(.*?)</tr>', page, re.DOTALL)
    assert server and worker
    # The override comes first, with {{ app.version }} set; the other containers follow in pod order.
    assert re.search(
        r"<td>1</td>\s*<td><ul class=\"plain\"><li><code>registry.local:5000/shop/server:1.0.0-debug</code>"
        r".*<code>example.com/shop/log-shipper:1.0.0</code>",
        server.group(1),
        re.DOTALL,
    )
    assert "<td>3</td>" in worker.group(1)
    assert "example.com/shop/task-worker:1.0.0" in worker.group(1)


def test_deployment_page_shows_the_ready_replicas_the_agent_reported(web: Stack) -> None:
    Progress(web).create("shop", DeploymentConfiguration(values={}, images={}, env={}))
    admin = web.headers(web.token_for("admin"))
    key = web.client.post("/api/v1/agents", json={"name": "local", "cluster": "local"}, headers=admin).json()[
        "key"
    ]
    report = {
        "components": [
            {
                "name": "server",
                "kind": "Deployment",
                "workload": "shop-server",
                "replicas": 2,
                "ready_replicas": 1,
                "images": ["example.com/shop/server:1.0.0"],
            },
        ]
    }
    response = web.client.put(
        "/api/v1/agent/deployments/shop/components", json=report, headers=web.headers(key)
    )
    assert response.status_code == 200, response.text
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/deployments/shop").text
    server = re.search(r'<th scope="row">server</th>(.*?)</tr>', page, re.DOTALL)
    worker = re.search(r'<th scope="row">task-worker</th>(.*?)</tr>', page, re.DOTALL)
    assert server and worker
    assert "1 of 2 ready" in server.group(1)
    assert "ready" not in worker.group(1)  # nothing reported for it


def test_the_deployment_page_polls_its_state_and_is_answered_only_when_it_changed(web: Stack) -> None:
    progress = Progress(web)
    progress.finish_create(progress.create("polled"))
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/deployments/polled").text
    seen = re.search(r'hx-get="/deployments/polled/state\?seen=([0-9a-f]+)"', page)
    assert seen, page

    unchanged = web.client.get(f"/deployments/polled/state?seen={seen.group(1)}")
    assert unchanged.status_code == 204 and unchanged.text == ""

    with web.session() as session:
        admin = auth.authenticate(session, web.token_for("admin"))
        changes.set_components_running(session, "polled", by=admin, components=["task-worker"], running=False)
    changed = web.client.get(f"/deployments/polled/state?seen={seen.group(1)}")
    assert changed.status_code == 200
    assert 'id="deployment-status" hx-swap-oob="true"' in changed.text
    row = re.search(r"<tr>\s*<th scope=\"row\">task-worker</th>.*?</tr>", changed.text, re.S)
    assert row and "Stopped" in row.group(0), changed.text
    assert f"seen={seen.group(1)}" not in changed.text

    with web.session() as session:
        admin = auth.authenticate(session, web.token_for("admin"))
        deleting = changes.delete_deployment(session, "polled", by=admin).task
    assert deleting is not None
    with web.session() as session:
        _, key = agents.create_agent(session, "local", "local")
    while True:  # an agent runs the stop, then the delete
        with web.session() as session:
            agent = agents.authenticate_agent(session, key)
            claim = agents.claim_next_task(session, agent, timedelta(minutes=1), timedelta(minutes=1))
            if claim is None:
                break
            agents.end_claimed_task(session, agent, claim.task.id, error=None, result=None)
    gone = web.client.get(f"/deployments/polled/state?seen={seen.group(1)}")
    assert gone.status_code == 286  # htmx stops polling
    assert "Deployment polled has been deleted." in gone.text
    # The history stops too (it answered 404 every second, forever), as it ended: the delete its last row.
    history = web.client.get("/deployments/polled/history?seen=x")
    assert history.status_code == 286
    assert f'data-task="{deleting.id}"' in history.text and "hx-trigger" not in history.text


def test_components_show_the_images_the_cluster_still_runs_during_an_upgrade(web: Stack) -> None:
    progress = Progress(web)
    progress.finish_create(progress.create("rolling"))
    progress.upgrade("rolling", "1.1.0")
    with web.session() as session:
        _, key = agents.create_agent(session, "local", "local")
    with web.session() as session:
        agent = agents.authenticate_agent(session, key)
        old: dict[str, Any] = {"kind": "Deployment", "replicas": 1, "ready_replicas": 1}
        agents.report_components(
            session,
            agent,
            "rolling",
            [
                ComponentStatus(
                    name="server", workload="rolling-server", **old, images=["example.com/shop/server:1.0.0"]
                ),
                ComponentStatus(
                    name="task-worker",
                    workload="rolling-task-worker",
                    **old,
                    images=["example.com/shop/task-worker:1.1.0"],
                ),
            ],
        )
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/deployments/rolling").text
    server = re.search(r"<th scope=\"row\">server</th>.*?</tr>", page, re.S)
    worker = re.search(r"<th scope=\"row\">task-worker</th>.*?</tr>", page, re.S)
    assert server and worker
    assert "The cluster runs: <code>example.com/shop/server:1.0.0</code>" in server.group(0)
    assert "example.com/shop/server:1.1.0" in server.group(0)  # what Styrmin applies
    assert "The cluster runs" not in worker.group(0)


def test_the_deployments_list_polls_and_is_answered_only_when_it_changed(web: Stack) -> None:
    progress = Progress(web)
    task_id = progress.create("listed")
    login_client(web.client, "admin", ADMIN_PASSWORD)
    page = web.client.get("/deployments").text
    seen = re.search(r'hx-get="/deployments\?seen=([0-9a-f]+)"', page)
    assert seen, page
    poll = {"HX-Request": "true"}

    assert web.client.get(f"/deployments?seen={seen.group(1)}", headers=poll).status_code == 204
    progress.finish_create(task_id)
    changed = web.client.get(f"/deployments?seen={seen.group(1)}", headers=poll)

    assert changed.status_code == 200
    assert changed.text.lstrip().startswith('<div id="deployments-list"')  # the table alone, not the page
    row = re.search(r"<tr>\s*<th scope=\"row\"><a href=\"/deployments/listed\">.*?</tr>", changed.text, re.S)
    assert row and "Succeeded" in row.group(0)
    # The same address without htmx is the whole page.
    assert "<html" in web.client.get(f"/deployments?seen={seen.group(1)}").text


def test_the_deployments_list_shows_each_deployments_own_newest_task(web: Stack) -> None:
    progress = Progress(web)
    first = progress.create("first")
    progress.finish_create(first)
    second = progress.create("second")
    progress.finish_create(second)
    upgrade = progress.upgrade("first", "1.1.0")
    login_client(web.client, "admin", ADMIN_PASSWORD)

    page = web.client.get("/deployments").text

    rows = {
        name: re.search(rf"<tr>\s*<th scope=\"row\"><a href=\"/deployments/{name}\">.*?</tr>", page, re.S)
        for name in ("first", "second")
    }
    assert rows["first"] and f'href="/tasks/{upgrade}">Upgrade #{upgrade}</a>' in rows["first"].group(0)
    assert rows["second"] and f'href="/tasks/{second}">Create #{second}</a>' in rows["second"].group(0)


def test_create_asks_for_confirmation_with_a_preview_before_recording_anything(web: Stack) -> None:
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    form = {"csrf_token": csrf, "name": "fresh", "namespace": "shop", "driver": "shop@1.0.0"}
    form |= {"env.server": "LOG_LEVEL=debug"}

    review = web.client.post("/new-deployment", data=form)

    assert review.status_code == 200, review.text
    assert 'Create deployment "fresh"?' in html.unescape(review.text)
    assert 'data-object="Deployment/fresh-server"' in review.text
    assert 'name="confirmed" value="yes"' in review.text
    assert _task_count(web) == 0
    again = web.client.post("/new-deployment", data={**form, "edit": "yes"})
    assert again.status_code == 200 and 'name="confirmed"' not in again.text
    assert "LOG_LEVEL=debug" in again.text and 'value="fresh"' in again.text
    assert _task_count(web) == 0

    done = web.client.post("/new-deployment", data={**form, "confirmed": "yes"}, follow_redirects=False)

    assert done.status_code == 303 and done.headers["location"] == "/deployments/fresh"
    assert _task_count(web) == 1


def test_a_task_cancelled_while_it_ran_says_its_agent_is_still_stopping_its_work(web: Stack) -> None:
    # The page said "Cancelled ... left the cluster as it was" while its Helm operation went on for
    # minutes and held the deployment's next one back.
    from sqlalchemy import update

    from styrmin_backend.clock import utcnow
    from styrmin_backend.services import cancel
    from styrmin_backend.store.models import TaskRow

    progress = Progress(web)
    task_id = progress.create("shop")
    progress.start(task_id)
    progress.step(task_id, "Install the chart")
    with web.session() as session:
        cancel.cancel_task(session, task_id, by="admin")
    login_client(web.client, "admin", ADMIN_PASSWORD)

    stopping = web.client.get(f"/tasks/{task_id}")
    assert "Its agent is still stopping its work" in stopping.text
    assert f'hx-get="/tasks/{task_id}/live"' in stopping.text  # the page follows it until it stopped

    with web.session() as session:
        session.execute(update(TaskRow).where(TaskRow.id == task_id).values(stopped_at=utcnow()))
    stopped = web.client.get(f"/tasks/{task_id}/live")
    assert "Its agent is still stopping its work" not in stopped.text
    assert f'hx-get="/tasks/{task_id}/live"' not in stopped.text


def test_a_browser_gets_the_uis_page_where_no_page_answers_and_programs_keep_json(web: Stack) -> None:
    # A browser showed the API's JSON for these ({"message":"Not Found"...}).
    login_client(web.client, "admin", ADMIN_PASSWORD)
    for path, status, said in (
        ("/nonexistent", 404, "No page is at this address."),
        ("/tasks/abc", 422, "The address is not one Styrmin can read: task_id:"),
        ("/tasks/1/retry", 405, "This address takes a form, not a visit"),
    ):
        page = web.client.get(path)
        assert page.status_code == status, (path, page.text)
        assert "text/html" in page.headers["content-type"], path
        assert said in html.unescape(page.text), (path, page.text)
    assert "POST" in web.client.get("/tasks/1/retry").headers["allow"]
    for path in ("/api/v1/nonexistent", "/api/v1/tasks/abc"):
        answer = web.client.get(path, headers=web.headers(web.token_for("admin")))
        assert answer.headers["content-type"] == "application/json", path
