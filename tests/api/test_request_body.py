"""A body larger than the server ever needs is refused with 413 before it is read whole, by whoever
sends it: the server read and parsed any body before it knew who sent it (80 MiB took 530 MB)."""

from __future__ import annotations

import html
import os
from collections.abc import Iterator
from pathlib import Path

from styrmin_backend.domain.limits import REQUEST_BODY_MAX_BYTES
from styrmin_drivers.package import pack_driver_folder
from tests.support.drivers import driver_folder

from .conftest import Stack, configure_shop_in_the_page

PAST_THE_LIMIT = REQUEST_BODY_MAX_BYTES + 1024


def _values_body(size: int) -> bytes:
    """A configuration body of ``size`` bytes: one long Helm value."""
    head, tail = b'{"values": {"blob": "', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_a_body_past_the_limit_is_refused_before_login_and_changes_nothing(stack: Stack) -> None:
    answer = stack.client.put(
        "/api/v1/deployments/shop/configuration",
        content=_values_body(PAST_THE_LIMIT),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 413, answer.text
    assert answer.json()["field"] == "body"
    assert f"larger than {REQUEST_BODY_MAX_BYTES // (1024 * 1024)} MiB" in answer.json()["message"]


def test_a_body_sent_in_chunks_is_refused_once_it_outgrows_the_limit(
    stack: Stack, shop_admin: dict[str, str]
) -> None:
    body = _values_body(2 * REQUEST_BODY_MAX_BYTES)

    def chunks() -> Iterator[bytes]:  # no length declared: the server learns the size as it reads
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    before = stack.client.get("/api/v1/deployments/shop", headers=shop_admin).json()
    answer = stack.client.put(
        "/api/v1/deployments/shop/configuration",
        content=chunks(),
        headers={**shop_admin, "Content-Type": "application/json"},
    )
    assert answer.status_code == 413, answer.text
    assert f"larger than {REQUEST_BODY_MAX_BYTES // (1024 * 1024)} MiB" in answer.json()["message"]
    assert stack.client.get("/api/v1/deployments/shop", headers=shop_admin).json() == before


def test_a_body_within_the_limit_is_read_as_before(stack: Stack, shop_admin: dict[str, str]) -> None:
    answer = stack.client.put(
        "/api/v1/deployments/shop/configuration",
        content=_values_body(REQUEST_BODY_MAX_BYTES - 1024),
        headers={**shop_admin, "Content-Type": "application/json"},
    )
    assert answer.status_code == 202, answer.text


def test_a_driver_archive_larger_than_a_body_may_be_is_still_pushed(
    stack: Stack, shop_admin: dict[str, str], tmp_path: Path
) -> None:
    folder = driver_folder(tmp_path / "shop", version="7.0.0")
    (folder / "blob.bin").write_bytes(os.urandom(PAST_THE_LIMIT))  # random: it does not compress
    archive = pack_driver_folder(folder)
    assert len(archive) > REQUEST_BODY_MAX_BYTES

    pushed = stack.client.post(
        "/api/v1/drivers", content=archive, headers={**shop_admin, "Content-Type": "application/gzip"}
    )
    assert pushed.status_code == 201, pushed.text


def test_the_configure_page_refuses_a_body_past_the_limit_with_a_page(
    stack: Stack, shop_admin: dict[str, str]
) -> None:
    page = configure_shop_in_the_page(stack, "blob: " + "x" * PAST_THE_LIMIT)
    assert page.status_code == 413
    assert "text/html" in page.headers["content-type"]
    assert f"larger than {REQUEST_BODY_MAX_BYTES // (1024 * 1024)} MiB" in html.unescape(page.text)
    tasks = stack.client.get("/api/v1/tasks", headers=shop_admin).json()["items"]
    assert [task["type"] for task in tasks] == ["create"]
