"""Every endpoint called as every kind of caller: each allowed or denied as the roles say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.drivers import pack_driver_folder
from tests.support.drivers import driver_folder

from .conftest import ADMIN_PASSWORD, Stack

ANY = "signed-in"  # any active user, whatever the role
AGENT = "agent"  # an agent key only: every user gets 401
AGENT_OR_OWN_ACTIONS = "agent-or-own-actions"  # an agent, or the actions of the step's own task
OWN_ACTIONS = "own-actions"  # the actions token of that very task only
# What each endpoint needs, written out here (not read from the code) so that a route whose guard
# changes, or a new route nobody classified, fails this test.
NEEDS: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/auth/login"): "public",
    ("POST", "/api/v1/auth/session"): "public",
    ("POST", "/api/v1/auth/logout"): ANY,
    ("GET", "/api/v1/auth/tokens"): ANY,
    ("POST", "/api/v1/auth/tokens"): ANY,
    ("DELETE", "/api/v1/auth/tokens/{token_id}"): ANY,
    ("GET", "/api/v1/whoami"): ANY,
    ("GET", "/api/v1/users"): ANY,
    ("GET", "/api/v1/users/{username}"): ANY,
    ("POST", "/api/v1/users"): Role.ADMIN,
    ("PATCH", "/api/v1/users/{username}"): Role.ADMIN,
    ("PUT", "/api/v1/users/{username}/password"): Role.ADMIN,
    ("POST", "/api/v1/users/{username}/password/reset"): Role.ADMIN,
    ("POST", "/api/v1/drivers/validate"): ANY,
    ("POST", "/api/v1/drivers"): Role.READ_WRITE,
    ("GET", "/api/v1/drivers"): ANY,
    ("GET", "/api/v1/drivers/{name}/versions/{version}"): ANY,
    ("GET", "/api/v1/drivers/{name}/versions/{version}/archive"): ANY,
    ("GET", "/api/v1/deployments"): ANY,
    ("GET", "/api/v1/deployments/{name}"): ANY,
    ("POST", "/api/v1/deployments"): Role.READ_WRITE,
    ("POST", "/api/v1/deployments/{name}/upgrade"): Role.READ_WRITE,
    ("PUT", "/api/v1/deployments/{name}/configuration"): Role.READ_WRITE,
    ("POST", "/api/v1/deployments/{name}/stop"): Role.READ_WRITE,
    ("POST", "/api/v1/deployments/{name}/start"): Role.READ_WRITE,
    ("DELETE", "/api/v1/deployments/{name}"): Role.READ_WRITE,
    ("POST", "/api/v1/deployments/{name}/preview"): ANY,
    ("GET", "/api/v1/deployments/{name}/revisions"): ANY,
    ("GET", "/api/v1/deployments/{name}/revisions/{revision}"): ANY,
    ("POST", "/api/v1/deployments/{name}/rollback"): Role.READ_WRITE,
    ("POST", "/api/v1/deployments/{name}/apply"): Role.READ_WRITE,
    ("GET", "/api/v1/deployments/{name}/backups"): ANY,
    ("GET", "/api/v1/backups"): ANY,
    ("POST", "/api/v1/deployments/{name}/backups"): Role.READ_WRITE,
    ("POST", "/api/v1/deployments/{name}/restore"): Role.READ_WRITE,
    ("GET", "/api/v1/backups/{backup_id}"): ANY,
    ("DELETE", "/api/v1/backups/{backup_id}"): Role.READ_WRITE,
    ("GET", "/api/v1/deployments/{name}/backup-schedule"): ANY,
    ("PUT", "/api/v1/deployments/{name}/backup-schedule"): Role.READ_WRITE,
    ("DELETE", "/api/v1/deployments/{name}/backup-schedule"): Role.READ_WRITE,
    ("GET", "/api/v1/clusters/{cluster}/backup-location"): ANY,
    ("PUT", "/api/v1/clusters/{cluster}/backup-location"): Role.ADMIN,
    ("POST", "/api/v1/agents"): Role.ADMIN,
    ("GET", "/api/v1/agents"): Role.ADMIN,
    ("DELETE", "/api/v1/agents/{name}"): Role.ADMIN,
    ("POST", "/api/v1/agent/claim"): AGENT,
    ("GET", "/api/v1/agent/instances/{instance}/presence"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/lease"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/steps"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/end"): AGENT,
    ("POST", "/api/v1/agent/steps/{step_id}/notes"): AGENT_OR_OWN_ACTIONS,
    ("PUT", "/api/v1/agent/steps/{step_id}/output"): AGENT_OR_OWN_ACTIONS,
    ("PUT", "/api/v1/agent/steps/{step_id}/flow-run"): AGENT,
    ("GET", "/api/v1/agent/drivers/{name}/versions/{version}/archive"): AGENT,
    ("PUT", "/api/v1/agent/deployments/{name}/components"): AGENT,
    ("POST", "/api/v1/agent/steps/{step_id}/end"): AGENT,
    ("GET", "/api/v1/agent/backup-location-checks"): AGENT,
    ("POST", "/api/v1/agent/backup-location-checks/{location_id}"): AGENT,
    ("GET", "/api/v1/tasks"): ANY,
    ("GET", "/api/v1/tasks/{task_id}"): ANY,
    ("POST", "/api/v1/tasks/{task_id}/retry"): Role.READ_WRITE,
    ("POST", "/api/v1/tasks/{task_id}/cancel"): Role.READ_WRITE,
    ("POST", "/api/v1/agent/tasks/{task_id}/helm-lock"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/helm-lock/renew"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/helm-lock/release"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/cancelled-in-prefect"): AGENT,
    ("POST", "/api/v1/agent/tasks/{task_id}/stopped"): AGENT,
    ("GET", "/api/v1/tasks/{task_id}/configuration"): OWN_ACTIONS,
    ("GET", "/api/v1/tasks/{task_id}/logs"): ANY,
}
# What the actions token of the task that created deployment "shop" (driver "shop") may call, on that
# deployment, its tasks and its driver; everything else answers 403.
ACTIONS_MAY: set[tuple[str, str]] = {
    ("GET", "/api/v1/whoami"),
    ("GET", "/api/v1/deployments/{name}"),
    ("POST", "/api/v1/deployments/{name}/upgrade"),
    ("PUT", "/api/v1/deployments/{name}/configuration"),
    ("POST", "/api/v1/deployments/{name}/stop"),
    ("POST", "/api/v1/deployments/{name}/start"),
    ("POST", "/api/v1/deployments/{name}/backups"),
    ("GET", "/api/v1/deployments/{name}/backups"),
    ("GET", "/api/v1/tasks/{task_id}"),
    ("GET", "/api/v1/tasks/{task_id}/configuration"),
    ("GET", "/api/v1/drivers/{name}/versions/{version}"),
    ("GET", "/api/v1/drivers/{name}/versions/{version}/archive"),
    ("POST", "/api/v1/agent/steps/{step_id}/notes"),
    ("PUT", "/api/v1/agent/steps/{step_id}/output"),
}

CALLERS = ("admin", "read-write", "read-only", "anonymous", "styrmin-actions", "deactivated")
_ROLE_OF = {"admin": Role.ADMIN, "read-write": Role.READ_WRITE, "read-only": Role.READ_ONLY}
_RANK = {Role.READ_ONLY: 0, Role.READ_WRITE: 1, Role.ADMIN: 2}


def expected_allowed(caller: str, need: str, route: tuple[str, str]) -> bool:
    if need == "public":
        return True
    if caller == ACTIONS_USERNAME:
        return route in ACTIONS_MAY
    if need == OWN_ACTIONS:
        return False
    if caller in ("anonymous", "deactivated") or need in (AGENT, AGENT_OR_OWN_ACTIONS):
        return False
    role = Role.READ_WRITE if caller == ACTIONS_USERNAME else _ROLE_OF[caller]
    return need == ANY or _RANK[role] >= _RANK[Role(need)]


def request_for(
    method: str, path: str, stack: Stack, token_id: int
) -> tuple[str, str, dict[str, Any] | None]:
    """A well-formed request for the endpoint, so that only the caller decides the outcome."""
    url = path.format(
        token_id=token_id,
        username="victim",
        name="shop",
        task_id=1,
        version="1.0.0",
        step_id=1,
        backup_id=1,
        cluster="local",
        location_id=1,
        revision=1,
        instance="styrmin-agent:000000000000",
    )
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", "/api/v1/auth/login"): {"username": "admin", "password": ADMIN_PASSWORD},
        ("POST", "/api/v1/auth/session"): {"username": "admin", "password": ADMIN_PASSWORD},
        ("POST", "/api/v1/auth/tokens"): {"name": "matrix"},
        ("POST", "/api/v1/users"): {"username": "newbie", "role": "read-only", "password": "long-enough"},
        ("PATCH", "/api/v1/users/{username}"): {"role": "read-write"},
        ("PUT", "/api/v1/users/{username}/password"): {"password": "another-long-one"},
        ("POST", "/api/v1/deployments"): {
            "name": "fresh",
            "namespace": "fresh",
            "driver": "shop",
            "driver_version": "1.0.0",
        },
        ("POST", "/api/v1/deployments/{name}/upgrade"): {"app_version": "2.0"},
        ("POST", "/api/v1/deployments/{name}/preview"): {"type": "upgrade", "app_version": "2.0"},
        ("POST", "/api/v1/deployments/{name}/rollback"): {"to_revision": 1},
        ("POST", "/api/v1/deployments/{name}/apply"): {
            "namespace": "shop",
            "driver": "shop",
            "driver_version": "1.0.0",
            "app_version": "3.0",
        },
        ("PUT", "/api/v1/deployments/{name}/configuration"): {"values": {"replicas": 2}},
        ("POST", "/api/v1/deployments/{name}/stop"): {"components": ["task-worker"]},
        ("POST", "/api/v1/deployments/{name}/start"): {"components": ["task-worker"]},
        ("POST", "/api/v1/agents"): {"name": "edge", "cluster": "edge"},
        ("POST", "/api/v1/deployments/{name}/backups"): {},
        ("PUT", "/api/v1/clusters/{cluster}/backup-location"): {"kind": "folder", "folder": "/srv/backups"},
        ("PUT", "/api/v1/deployments/{name}/backup-schedule"): {"cron": "0 3 * * *"},
        ("POST", "/api/v1/deployments/{name}/restore"): {"backup_id": 1},
        ("POST", "/api/v1/agent/claim"): {},
        ("POST", "/api/v1/agent/tasks/{task_id}/lease"): {},
        ("POST", "/api/v1/agent/tasks/{task_id}/steps"): {"name": "x"},
        ("POST", "/api/v1/agent/tasks/{task_id}/end"): {},
        ("POST", "/api/v1/agent/steps/{step_id}/notes"): {"note": "x"},
        ("PUT", "/api/v1/agent/steps/{step_id}/output"): {"output_tail": "x", "output_truncated": False},
        ("PUT", "/api/v1/agent/steps/{step_id}/flow-run"): {"flow_run_id": "x"},
        ("PUT", "/api/v1/agent/deployments/{name}/components"): {"components": []},
        ("POST", "/api/v1/agent/steps/{step_id}/end"): {},
        ("POST", "/api/v1/agent/tasks/{task_id}/helm-lock"): {"namespace": "shop", "release": "shop"},
        ("POST", "/api/v1/agent/tasks/{task_id}/helm-lock/renew"): {"namespace": "shop", "release": "shop"},
        ("POST", "/api/v1/agent/tasks/{task_id}/helm-lock/release"): {"namespace": "shop", "release": "shop"},
        ("POST", "/api/v1/agent/tasks/{task_id}/cancelled-in-prefect"): {"flow_run_id": "x"},
    }
    return method, url, bodies.get((method, path))


def test_every_api_route_is_classified(stack: Stack) -> None:
    paths = stack.client.get("/api/openapi.json").json()["paths"]
    routes = {(method.upper(), path) for path, operations in paths.items() for method in operations}
    assert routes == set(NEEDS), "classify every new endpoint in NEEDS"


@pytest.fixture
def callers(stack: Stack) -> dict[str, Callable[[], dict[str, str]]]:
    """For each kind of caller, a function that gives fresh headers (each call a fresh token)."""
    stack.add_driver()
    admin_token = stack.login("admin", ADMIN_PASSWORD)
    admin = stack.headers(admin_token)
    created_task = stack.client.post(
        "/api/v1/deployments",
        json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
        headers=admin,
    ).json()["task"]["id"]
    assert created_task == 1
    stack.make_user("victim", Role.READ_ONLY)
    stack.make_user("writer", Role.READ_WRITE)
    stack.make_user("reader", Role.READ_ONLY)
    stack.make_user("gone", Role.ADMIN)
    gone_token = stack.login("gone", "a-long-password")
    stack.client.patch("/api/v1/users/gone", json={"active": False}, headers=admin)
    return {
        "admin": lambda: stack.headers(stack.token_for("admin")),
        "read-write": lambda: stack.headers(stack.token_for("writer")),
        "read-only": lambda: stack.headers(stack.token_for("reader")),
        "anonymous": lambda: {},
        "styrmin-actions": lambda: stack.headers(stack.actions_token(task_id=created_task)[1]),
        "deactivated": lambda: stack.headers(gone_token),
    }


def _own_token_id(stack: Stack, headers: dict[str, str]) -> int:
    """The id of a token the caller may see (its own), or one nobody has where it may see none."""
    tokens = stack.client.get("/api/v1/auth/tokens", headers=headers).json()
    return int(tokens[0]["id"]) if isinstance(tokens, list) and tokens else 999_999


def test_role_matrix(stack: Stack, callers: dict[str, Callable[[], dict[str, str]]], tmp_path: Path) -> None:
    archive = pack_driver_folder(driver_folder(tmp_path / "shop", version="2.0.0"))
    failures = []
    for (method, path), need in sorted(NEEDS.items()):
        for caller in CALLERS:
            stack.client.cookies.clear()  # a session cookie from /auth/session would authenticate the next call
            headers = callers[caller]()
            own_token = _own_token_id(stack, headers) if "{token_id}" in path else 999_999
            method_, url, body = request_for(method, path, stack, own_token)
            if path.startswith("/api/v1/drivers") and method == "POST":
                headers = {**headers, "Content-Type": "application/gzip"}
                response = stack.client.request(method_, url, content=archive, headers=headers)
            else:
                response = stack.client.request(method_, url, json=body, headers=headers)
            allowed = expected_allowed(caller, need, (method, path))
            denied_as = 401 if caller in ("anonymous", "deactivated") or need == AGENT else 403
            if allowed and response.status_code in (401, 403):
                failures.append(
                    f"{caller} {method} {path}: expected allowed, got {response.status_code} {response.text}"
                )
            if not allowed and response.status_code != denied_as:
                failures.append(f"{caller} {method} {path}: expected {denied_as}, got {response.status_code}")
            if allowed:
                assert response.status_code < 500, response.text
    assert not failures, "\n".join(failures)
