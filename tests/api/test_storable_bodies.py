"""Values no database, JSON document or Helm chart holds are refused with 422 naming where, and nothing
is recorded: NaN and Infinity, text that is not valid Unicode, nesting without end (both databases)."""

from __future__ import annotations

import html
from typing import Any

import pytest

from styrmin_backend.domain.limits import YAML_MAX_DEPTH

from .conftest import Stack, configure_shop_in_the_page

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def admin(shop_admin: dict[str, str]) -> dict[str, str]:
    """The admin's headers, sending JSON as written (raw bodies: NaN and lone surrogates)."""
    return {**shop_admin, **JSON}


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    ("values", "said"),
    [
        # Each of these was taken (202) and stored, or answered 500, before.
        (b'{"replicas": NaN}', "values.replicas is not a finite number (NaN or Infinity)"),
        (b'{"limits": {"cpu": 1e999}}', "values.limits.cpu is not a finite number (NaN or Infinity)"),
        (b'{"names": ["web", "\\ud800"]}', "values.names.1 is not valid Unicode text"),
        (b'{"\\udfff": 1}', "is not valid Unicode text"),
        (b'{"deep": ' + _nested(YAML_MAX_DEPTH + 5) + b"}", f"more than {YAML_MAX_DEPTH} deep"),
        (b'{"deeper": ' + _nested(600) + b"}", f"more than {YAML_MAX_DEPTH} deep"),
    ],
    ids=["nan", "infinity", "lone-surrogate", "lone-surrogate-key", "too-deep", "far-too-deep"],
)
def test_values_no_chart_can_hold_are_refused_naming_where_and_record_nothing(
    stack: Stack, admin: dict[str, str], values: bytes, said: str
) -> None:
    before = stack.client.get("/api/v1/deployments/shop", headers=admin).json()

    answer = stack.client.put(
        "/api/v1/deployments/shop/configuration", content=b'{"values": ' + values + b"}", headers=admin
    )

    assert answer.status_code == 422, answer.text
    assert said in answer.json()["message"]
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).json() == before


def test_values_nested_as_deep_as_a_driver_may_nest_them_are_taken(
    stack: Stack, admin: dict[str, str]
) -> None:
    deep: Any = "leaf"
    for _ in range(YAML_MAX_DEPTH - 3):  # the body and the configuration hold it three deep
        deep = {"x": deep}
    answer = stack.client.put("/api/v1/deployments/shop/configuration", json={"values": deep}, headers=admin)
    assert answer.status_code == 202, answer.text


def test_the_configure_page_refuses_values_that_are_not_numbers_beside_the_field(
    stack: Stack, admin: dict[str, str]
) -> None:
    page = configure_shop_in_the_page(stack, "replicas: .nan\n")
    assert page.status_code == 422, page.text
    assert "values.replicas is not a finite number (NaN or Infinity)" in html.unescape(page.text)
    tasks = stack.client.get("/api/v1/tasks", headers=admin).json()["items"]
    assert [task["type"] for task in tasks] == ["create"]


def test_values_in_the_shape_of_a_stored_secret_are_refused_and_every_read_goes_on(
    stack: Stack, admin: dict[str, str]
) -> None:
    # Taken before (202): stored as a sealed secret no key opens, it made every list of deployments,
    # /metrics, every claim of the cluster's agents and the next start of the server fail.
    before = stack.client.get("/api/v1/deployments/shop", headers=admin).json()
    sealed = {"db": {"hosts": [{"$styrmin-encrypted": "garbage"}]}}

    answer = stack.client.put(
        "/api/v1/deployments/shop/configuration", json={"values": sealed}, headers=admin
    )
    created = stack.client.post(
        "/api/v1/deployments",
        json={"name": "sealed", "namespace": "sealed", "driver": "shop", "driver_version": "1.0.0",
              "configuration": {"values": sealed}},
        headers=admin,
    )  # fmt: skip

    applied = stack.client.post(
        "/api/v1/deployments/shop/apply",
        json={"driver": "shop", "driver_version": "1.0.0", "configuration": {"values": sealed}},
        headers=admin,
    )
    for refused in (answer, created, applied):
        assert refused.status_code == 422, refused.text
        assert 'values.db.hosts.0 uses the key "$styrmin-encrypted"' in refused.json()["message"]
    page = configure_shop_in_the_page(stack, 'db: {"$styrmin-encrypted": garbage}\n')
    assert page.status_code == 422, page.text
    assert 'values.db uses the key "$styrmin-encrypted"' in html.unescape(page.text)
    assert stack.client.get("/api/v1/deployments/shop", headers=admin).json() == before
    assert stack.client.get("/api/v1/deployments", headers=admin).status_code == 200
    assert stack.client.get("/api/v1/deployments/sealed", headers=admin).status_code == 404


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"values": {"replicas": 2,}}', "The body is not valid JSON (Expecting property name enclosed in"),
        # Past Python's 4,300 digits, int() refuses the number: it was a 422 naming field "0".
        (b'{"values": {"replicas": ' + b"9" * 5000 + b"}}", "The body is not valid JSON ("),
    ],
    ids=["trailing-comma", "endless-number"],
)
def test_a_body_that_is_not_json_is_a_400_for_the_body_as_a_whole(
    stack: Stack, admin: dict[str, str], body: bytes, said: str
) -> None:
    answer = stack.client.put("/api/v1/deployments/shop/configuration", content=body, headers=admin)

    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == "body", answer.text
    assert answer.json()["message"].startswith(said)
    assert answer.json()["message"].endswith("; send a JSON document.")
