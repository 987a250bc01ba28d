"""Secret configuration values: shown only as set in every API answer, kept when sent back, and
readable with their values only by the actions of the task that applies them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import SECRET_SET

from .conftest import ADMIN_PASSWORD, Stack

SECRETS = ("hunter2-value", "s3cr3t-pw", "tok-abcdef123", "dsn-secret-9")
CONFIGURATION: dict[str, Any] = {
    "values": {
        "database": {"password": "hunter2-value", "url": "postgres://shop:s3cr3t-pw@db/shop"},
        "replicas": 2,
        "emptyPassword": "",
    },
    "env": {"server": {"API_TOKEN": "tok-abcdef123", "SENTRY_DSN": "dsn-secret-9", "LOG_LEVEL": "debug"}},
}


@pytest.fixture
def created(stack: Stack) -> tuple[int, str]:
    """Deployment "shop" created with secrets; its create task and the create answer's text."""
    stack.add_driver()
    admin = stack.headers(stack.login("admin", ADMIN_PASSWORD))
    response = stack.client.post(
        "/api/v1/deployments",
        json={
            "name": "shop",
            "namespace": "shop",
            "driver": "shop",
            "driver_version": "1.0.0",
            "configuration": CONFIGURATION,
        },
        headers=admin,
    )
    assert response.status_code == 202, response.text
    return response.json()["task"]["id"], response.text


@pytest.mark.parametrize("role", [Role.READ_ONLY, Role.READ_WRITE, Role.ADMIN])
def test_secret_values_are_absent_from_every_api_answer(
    stack: Stack, created: tuple[int, str], role: Role
) -> None:
    task_id, create_answer = created
    headers = stack.headers(stack.make_user(f"user-{role.value}", role))
    answers = [create_answer]
    for path in (
        "/api/v1/deployments",
        "/api/v1/deployments/shop",
        "/api/v1/tasks",
        f"/api/v1/tasks/{task_id}",
    ):
        response = stack.client.get(path, headers=headers)
        assert response.status_code == 200, response.text
        answers.append(response.text)
    for answer in answers:
        for secret in SECRETS:
            assert secret not in answer
    shown = stack.client.get("/api/v1/deployments/shop", headers=headers).json()["configuration"]
    assert shown["values"]["database"] == {
        "password": SECRET_SET,
        "url": f"postgres://shop:{SECRET_SET}@db/shop",
    }
    assert shown["values"]["emptyPassword"] == ""  # unset shows as unset
    assert shown["values"]["replicas"] == 2
    assert shown["env"]["server"] == {"API_TOKEN": SECRET_SET, "SENTRY_DSN": SECRET_SET, "LOG_LEVEL": "debug"}
    refused = stack.client.get(f"/api/v1/tasks/{task_id}/configuration", headers=headers)
    assert refused.status_code == 403


def test_configuration_sent_back_as_read_keeps_its_secrets(stack: Stack, created: tuple[int, str]) -> None:
    writer = stack.headers(stack.make_user("writer", Role.READ_WRITE))
    shown = stack.client.get("/api/v1/deployments/shop", headers=writer).json()["configuration"]
    shown["env"]["server"]["LOG_LEVEL"] = "info"
    shown["values"]["replicas"] = 3
    change = stack.client.put("/api/v1/deployments/shop/configuration", json=shown, headers=writer)
    assert change.status_code == 202, change.text
    configure_task = change.json()["task"]["id"]
    _, token = stack.actions_token(task_id=configure_task)
    applied = stack.client.get(f"/api/v1/tasks/{configure_task}/configuration", headers=stack.headers(token))
    assert applied.status_code == 200, applied.text
    assert applied.json()["env"]["server"] == {
        "API_TOKEN": "tok-abcdef123",
        "SENTRY_DSN": "dsn-secret-9",
        "LOG_LEVEL": "info",
    }
    assert applied.json()["values"]["database"]["url"] == "postgres://shop:s3cr3t-pw@db/shop"
    assert applied.json()["values"]["replicas"] == 3


def test_a_new_secret_value_replaces_the_stored_one(stack: Stack, created: tuple[int, str]) -> None:
    writer = stack.headers(stack.make_user("writer", Role.READ_WRITE))
    shown = stack.client.get("/api/v1/deployments/shop", headers=writer).json()["configuration"]
    shown["env"]["server"]["API_TOKEN"] = "tok-rotated-456"
    del shown["env"]["server"]["SENTRY_DSN"]
    change = stack.client.put("/api/v1/deployments/shop/configuration", json=shown, headers=writer)
    configure_task = change.json()["task"]["id"]
    _, token = stack.actions_token(task_id=configure_task)
    applied = stack.client.get(f"/api/v1/tasks/{configure_task}/configuration", headers=stack.headers(token))
    assert applied.json()["env"]["server"] == {"API_TOKEN": "tok-rotated-456", "LOG_LEVEL": "debug"}


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda c: c["env"]["server"].update(DATABASE_PASSWORD=c["env"]["server"].pop("API_TOKEN")),
         "configuration.env.server.DATABASE_PASSWORD"),
        (lambda c: c["values"].update(apiKey=SECRET_SET), "configuration.values.apiKey"),
        (lambda c: c["values"].update(cache=f"redis://:{SECRET_SET}@cache:6379"), "configuration.values.cache"),
    ],
    ids=["secret-renamed", "secret-added-as-placeholder", "url-password-added-as-placeholder"],
)  # fmt: skip
def test_a_placeholder_where_no_secret_is_stored_is_refused_and_changes_nothing(
    stack: Stack, created: tuple[int, str], edit: Any, field: str
) -> None:
    # Taken before: the workload got the text "<secret: set>" as its secret, and every page showed it as set.
    writer = stack.headers(stack.make_user("writer", Role.READ_WRITE))
    before = stack.client.get("/api/v1/deployments/shop", headers=writer).json()
    shown = copy.deepcopy(before["configuration"])
    edit(shown)

    change = stack.client.put("/api/v1/deployments/shop/configuration", json=shown, headers=writer)

    assert change.status_code == 422, change.text
    assert change.json()["field"] == field
    assert change.json()["message"].startswith(f'{field} reads "{SECRET_SET}", but no secret is stored')
    assert stack.client.get("/api/v1/deployments/shop", headers=writer).json() == before
