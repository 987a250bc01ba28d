"""Logging in, tokens, sessions, and the built-in user styrmin-actions."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from styrmin_backend.browser_session import CSRF_HEADER, SESSION_COOKIE, csrf_token_for
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.services import auth
from styrmin_backend.store.models import TokenRow

from .conftest import ADMIN_PASSWORD, USER_PASSWORD, Stack


def test_login_gives_a_token_that_whoami_accepts(stack: Stack) -> None:
    token = stack.login("admin", ADMIN_PASSWORD)
    response = stack.client.get("/api/v1/whoami", headers=stack.headers(token))
    assert response.status_code == 200
    assert response.json() == {"username": "admin", "role": "admin", "builtin": False, "token_kind": "api"}


def test_tokens_are_stored_hashed(stack: Stack) -> None:
    token = stack.login("admin", ADMIN_PASSWORD)
    with stack.session() as session:
        stored = session.scalars(select(TokenRow.token_hash)).all()
    assert token not in stored
    assert all(len(h) == 64 and token not in h for h in stored)


def test_wrong_password_is_refused_without_saying_which_part_was_wrong(stack: Stack) -> None:
    stack.make_user("alice", Role.READ_WRITE)
    for username in ("alice", "nobody"):
        response = stack.client.post(
            "/api/v1/auth/login", json={"username": username, "password": "wrong-one"}
        )
        assert response.status_code == 401
        assert response.json()["message"] == "The user name or password is wrong."


def test_revoked_token_is_refused(stack: Stack) -> None:
    token = stack.login("admin", ADMIN_PASSWORD)
    assert stack.client.post("/api/v1/auth/logout", headers=stack.headers(token)).status_code == 204
    response = stack.client.get("/api/v1/whoami", headers=stack.headers(token))
    assert response.status_code == 401
    assert "revoked" in response.json()["message"]


def test_revoking_one_token_by_id_leaves_the_others(stack: Stack) -> None:
    first = stack.login("admin", ADMIN_PASSWORD)
    made = stack.client.post("/api/v1/auth/tokens", json={"name": "ci"}, headers=stack.headers(first)).json()
    names = [t["name"] for t in stack.client.get("/api/v1/auth/tokens", headers=stack.headers(first)).json()]
    assert "ci" in names
    assert (
        stack.client.delete(f"/api/v1/auth/tokens/{made['id']}", headers=stack.headers(first)).status_code
        == 204
    )
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(made["token"])).status_code == 401
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(first)).status_code == 200


def test_expired_token_is_refused(stack: Stack) -> None:
    token = stack.login("admin", ADMIN_PASSWORD)
    with stack.session() as session:
        session.execute(update(TokenRow).values(expires_at=auth.utcnow() - timedelta(seconds=1)))
    response = stack.client.get("/api/v1/whoami", headers=stack.headers(token))
    assert response.status_code == 401
    assert "expired" in response.json()["message"]


def test_token_lifetime_beyond_the_maximum_is_refused_naming_the_field(stack: Stack) -> None:
    response = stack.client.post(
        "/api/v1/auth/login",
        json={"username": "admin", "password": ADMIN_PASSWORD, "expires_in_seconds": 9 * 365 * 24 * 3600},
    )
    assert response.status_code == 422
    assert response.json()["field"] == "expires_in_seconds"


def test_deactivated_user_cannot_log_in_and_its_tokens_are_refused(stack: Stack) -> None:
    token = stack.make_user("bob", Role.READ_WRITE)
    admin = stack.login("admin", ADMIN_PASSWORD)
    stack.client.patch("/api/v1/users/bob", json={"active": False}, headers=stack.headers(admin))
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(token)).status_code == 401
    response = stack.client.post("/api/v1/auth/login", json={"username": "bob", "password": USER_PASSWORD})
    assert response.status_code == 401
    assert "deactivated" in response.json()["message"]
    stack.client.patch("/api/v1/users/bob", json={"active": True}, headers=stack.headers(admin))
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(token)).status_code == 200


def test_login_as_styrmin_actions_is_rejected_clearly(stack: Stack) -> None:
    response = stack.client.post(
        "/api/v1/auth/login", json={"username": ACTIONS_USERNAME, "password": "anything"}
    )
    assert response.status_code == 401
    assert "No one can log in as styrmin-actions" in response.json()["message"]
    response = stack.client.post("/api/v1/auth/session", json={"username": ACTIONS_USERNAME, "password": "x"})
    assert response.status_code == 401


def test_setting_or_resetting_the_password_of_styrmin_actions_is_refused(stack: Stack) -> None:
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    response = stack.client.put(
        f"/api/v1/users/{ACTIONS_USERNAME}/password", json={"password": "a-new-password"}, headers=admin
    )
    assert response.status_code == 403
    assert "refuses to set or reset its password" in response.json()["message"]
    response = stack.client.post(f"/api/v1/users/{ACTIONS_USERNAME}/password/reset", headers=admin)
    assert response.status_code == 403
    users = {u["username"]: u for u in stack.client.get("/api/v1/users", headers=admin).json()}
    assert users[ACTIONS_USERNAME]["has_password"] is False


def test_styrmin_actions_is_listed_as_built_in_read_write(stack: Stack) -> None:
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    users = {u["username"]: u for u in stack.client.get("/api/v1/users", headers=admin).json()}
    assert users[ACTIONS_USERNAME]["builtin"] is True
    assert users[ACTIONS_USERNAME]["role"] == "read-write"
    assert users["admin"]["builtin"] is False


def test_styrmin_actions_may_be_made_read_only_but_not_admin(stack: Stack) -> None:
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    made_admin = stack.client.patch(
        f"/api/v1/users/{ACTIONS_USERNAME}", json={"role": "admin"}, headers=admin
    )
    assert made_admin.status_code == 403, made_admin.text
    assert made_admin.json()["field"] == "role"
    assert "Admin is refused" in made_admin.json()["message"]
    users = {u["username"]: u for u in stack.client.get("/api/v1/users", headers=admin).json()}
    assert users[ACTIONS_USERNAME]["role"] == "read-write"
    read_only = stack.client.patch(
        f"/api/v1/users/{ACTIONS_USERNAME}", json={"role": "read-only"}, headers=admin
    )
    assert read_only.status_code == 200, read_only.text


def test_actions_token_works_and_is_refused_once_revoked(stack: Stack) -> None:
    token_id, token = stack.actions_token()
    response = stack.client.get("/api/v1/whoami", headers=stack.headers(token))
    assert response.json()["username"] == ACTIONS_USERNAME
    with stack.session() as session:
        auth.revoke_actions_token(session, token_id)
    assert stack.client.get("/api/v1/whoami", headers=stack.headers(token)).status_code == 401


def test_deactivated_styrmin_actions_token_is_refused(stack: Stack) -> None:
    _, token = stack.actions_token()
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    assert (
        stack.client.patch(
            f"/api/v1/users/{ACTIONS_USERNAME}", json={"active": False}, headers=admin
        ).status_code
        == 200
    )
    response = stack.client.get("/api/v1/whoami", headers=stack.headers(token))
    assert response.status_code == 401
    assert "deactivated" in response.json()["message"]


def test_read_only_styrmin_actions_cannot_write_and_is_told_why(stack: Stack) -> None:
    stack.add_driver()
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    stack.client.post(
        "/api/v1/deployments",
        json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
        headers=admin,
    )
    stack.client.patch(f"/api/v1/users/{ACTIONS_USERNAME}", json={"role": "read-only"}, headers=admin)
    _, token = stack.actions_token(task_id=1)
    response = stack.client.post(
        "/api/v1/deployments/shop/stop", json={"components": ["task-worker"]}, headers=stack.headers(token)
    )
    assert response.status_code == 403
    assert response.json()["message"] == (
        'User "styrmin-actions" has the role Read-only; this needs Read/write. Ask an administrator to change the role.'
    )
    assert stack.client.get("/api/v1/deployments/shop", headers=stack.headers(token)).status_code == 200


def test_no_endpoint_mints_tokens_for_styrmin_actions(stack: Stack) -> None:
    _, token = stack.actions_token()
    response = stack.client.post("/api/v1/auth/tokens", json={"name": "mine"}, headers=stack.headers(token))
    assert response.status_code == 403
    assert "it cannot call POST /api/v1/auth/tokens" in response.json()["message"]
    assert "Styrmin gives each reconciliation's actions their own token" in response.json()["message"]


def test_session_cookie_is_httponly_samesite_and_writes_need_the_csrf_token(stack: Stack) -> None:
    response = stack.client.post(
        "/api/v1/auth/session", json={"username": "admin", "password": ADMIN_PASSWORD}
    )
    assert response.status_code == 201
    cookie_header = "; ".join(response.headers.get_list("set-cookie"))
    session_part = next(c for c in response.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
    assert "HttpOnly" in session_part and "SameSite=lax" in session_part
    assert "styrmin_csrf" in cookie_header
    session_token = stack.client.cookies[SESSION_COOKIE]
    assert stack.client.get("/api/v1/whoami").json()["token_kind"] == "session"
    body = {"username": "carol", "role": "read-only", "password": USER_PASSWORD}
    refused = stack.client.post("/api/v1/users", json=body)
    assert refused.status_code == 403
    assert CSRF_HEADER in refused.json()["message"]
    allowed = stack.client.post(
        "/api/v1/users", json=body, headers={CSRF_HEADER: csrf_token_for(session_token)}
    )
    assert allowed.status_code == 201


def test_admin_cannot_demote_or_deactivate_themself(stack: Stack) -> None:
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    for body in ({"role": "read-only"}, {"active": False}):
        response = stack.client.patch("/api/v1/users/admin", json=body, headers=admin)
        assert response.status_code == 409
    assert stack.client.get("/api/v1/whoami", headers=admin).json()["role"] == "admin"


def test_reset_password_gives_a_new_password_that_logs_in(stack: Stack) -> None:
    stack.make_user("dave", Role.READ_ONLY)
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    new = stack.client.post("/api/v1/users/dave/password/reset", headers=admin).json()["password"]
    assert (
        stack.client.post(
            "/api/v1/auth/login", json={"username": "dave", "password": USER_PASSWORD}
        ).status_code
        == 401
    )
    assert stack.login("dave", new)


def test_a_nul_character_in_any_text_is_refused_naming_the_field_and_stores_nothing(stack: Stack) -> None:
    # PostgreSQL stores no NUL in text: these answered 500 there before.
    for path in ("/api/v1/auth/login", "/api/v1/auth/session"):
        answer = stack.client.post(path, json={"username": "ad\x00min", "password": "x"})
        assert answer.status_code == 422, answer.text
        assert "username" in answer.text
    admin = stack.headers(stack.token_for("admin"))
    before = stack.client.get("/api/v1/auth/tokens", headers=admin).json()
    answer = stack.client.post("/api/v1/auth/tokens", json={"name": "ci\x00"}, headers=admin)
    assert answer.status_code == 422 and "name" in answer.text and "NUL" in answer.text, answer.text
    assert stack.client.get("/api/v1/auth/tokens", headers=admin).json() == before


def test_the_login_page_refuses_a_user_name_with_control_characters_plainly(stack: Stack) -> None:
    page = stack.client.get("/login")
    csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    answer = stack.client.post(
        "/login", data={"csrf_token": csrf, "username": "ad\tmin", "password": "x", "next": "/"}
    )
    assert answer.status_code == 401
    assert "control characters" in answer.text
