"""Every list of the API pages the same way (``limit``, ``cursor``, the Link header's next URL), and
the lists filter where users need it: deployments by status, driver and cluster, backups of all."""

from __future__ import annotations

import re

import httpx

from tests.api.conftest import Stack


def _follow(stack: Stack, url: str, headers: dict[str, str]) -> tuple[list[object], int]:
    """Every item of a list, following the Link header from page to page; and the number of pages."""
    items: list[object] = []
    pages = 0
    next_url: str | None = url
    while next_url is not None:
        answer: httpx.Response = stack.client.get(next_url, headers=headers)
        assert answer.status_code == 200, answer.text
        pages += 1
        body = answer.json()
        items += body["items"] if isinstance(body, dict) else body
        found = re.match(r'<([^>]+)>; rel="next"', answer.headers.get("link", ""))
        next_url = found.group(1) if found else None
    return items, pages


def test_each_list_pages_by_limit_and_the_link_header(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    stack.add_driver("2.0.0")
    admin = stack.headers(stack.token_for("admin"))
    for name in ("alpha", "beta", "gamma"):
        body = {"name": name, "namespace": name, "driver": "shop", "driver_version": "1.0.0"}
        assert stack.client.post("/api/v1/deployments", json=body, headers=admin).status_code == 202
    for url, key in (
        ("/api/v1/deployments?limit=2", "name"),
        ("/api/v1/drivers?limit=1", "version"),
        ("/api/v1/tasks?limit=2", "id"),
        ("/api/v1/users?limit=1", "username"),
    ):
        whole = stack.client.get(url.split("?")[0], headers=admin).json()
        whole = whole["items"] if isinstance(whole, dict) else whole
        paged, pages = _follow(stack, url, admin)
        assert [item[key] for item in paged] == [item[key] for item in whole], url  # type: ignore[index]
        assert pages > 1, url
    last = stack.client.get("/api/v1/deployments?limit=3", headers=admin)
    assert "link" not in last.headers  # no next page


def test_a_cursor_that_names_nothing_is_refused_naming_the_field(stack: Stack) -> None:
    admin = stack.headers(stack.token_for("admin"))
    answer = stack.client.get("/api/v1/deployments?cursor=gone", headers=admin)
    assert answer.status_code == 422
    assert answer.json()["field"] == "cursor"


def test_deployments_filter_by_status_driver_and_cluster(stack: Stack) -> None:
    stack.add_driver("1.0.0")
    admin = stack.headers(stack.token_for("admin"))
    body = {"name": "shop1", "namespace": "shop1", "driver": "shop", "driver_version": "1.0.0"}
    assert stack.client.post("/api/v1/deployments", json=body, headers=admin).status_code == 202

    def names(query: str) -> list[str]:
        answer = stack.client.get(f"/api/v1/deployments?{query}", headers=admin)
        assert answer.status_code == 200, answer.text
        return [d["name"] for d in answer.json()]

    assert names("status=deploying") == ["shop1"]
    assert names("status=running") == []
    assert names("driver=shop") == ["shop1"] and names("driver=other") == []
    assert names("cluster=local") == ["shop1"] and names("cluster=edge") == []
    refused = stack.client.get("/api/v1/deployments?status=sleeping", headers=admin)
    assert refused.status_code == 422
