"""A NUL character in a request's path or query: refused with 422 naming where, on both databases."""

from __future__ import annotations

import html

import pytest

from tests.web.conftest import login_client

from .conftest import ADMIN_PASSWORD, Stack


@pytest.mark.parametrize(
    ("path", "field"),
    [
        # PostgreSQL stores no NUL in text: each of these answered 500 there before.
        ("/api/v1/deployments/shop%00", "path"),
        ("/api/v1/deployments/shop%00/revisions", "path"),
        ("/api/v1/users/ad%00min", "path"),
        ("/api/v1/backups?deployment=shop%00", "deployment"),
        ("/api/v1/tasks?limit=5&deployment=sh%00op", "deployment"),
        ("/api/v1/tasks?dep%00loyment=shop", "query"),
    ],
)
def test_a_read_with_nul_in_its_path_or_query_is_refused_naming_where(
    stack: Stack, shop_admin: dict[str, str], path: str, field: str
) -> None:
    answer = stack.client.get(path, headers=shop_admin)

    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] == field
    assert "NUL character (%00); remove it" in body["message"]


def test_a_change_with_nul_in_its_path_is_refused_and_records_nothing(
    stack: Stack, shop_admin: dict[str, str]
) -> None:
    before = stack.client.get("/api/v1/tasks", headers=shop_admin).json()["items"]

    answer = stack.client.post(
        "/api/v1/deployments/shop%00/upgrade", json={"app_version": "2.0.0"}, headers=shop_admin
    )

    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "path"
    assert stack.client.get("/api/v1/tasks", headers=shop_admin).json()["items"] == before


def test_a_page_with_nul_in_its_path_or_query_says_what_to_remove(
    stack: Stack, shop_admin: dict[str, str]
) -> None:
    login_client(stack.client, "admin", ADMIN_PASSWORD)

    for path, said in (
        ("/deployments/shop%00", "The path contains a NUL character (%00); remove it."),
        (
            "/deployments?driver=sh%00op",
            "The query parameter driver contains a NUL character (%00); remove it.",
        ),
    ):
        page = stack.client.get(path)
        assert page.status_code == 422, page.text
        assert page.headers["content-type"].startswith("text/html")
        assert said in html.unescape(page.text)
    assert stack.client.get("/deployments/shop").status_code == 200
