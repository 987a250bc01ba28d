"""Pushing a driver from the drivers page: validated like the CLI, stored once, refused with every problem."""

from __future__ import annotations

from pathlib import Path

from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import pack_driver_folder
from styrmin_backend.services import drivers
from tests.api.conftest import ADMIN_PASSWORD, USER_PASSWORD, Stack
from tests.support.drivers import driver_folder
from tests.web.conftest import login_client, make_user


def _stored(stack: Stack) -> list[str]:
    with stack.session() as session:
        return [f"{row.name}@{row.version}" for row in drivers.list_drivers(session)]


def _push(stack: Stack, csrf: str, archive: bytes, filename: str = "shop.tar.gz") -> tuple[int, str]:
    response = stack.client.post(
        "/drivers", data={"csrf_token": csrf}, files={"archive": (filename, archive, "application/gzip")}
    )
    return response.status_code, response.text


def test_an_operator_pushes_a_driver_and_pushing_it_again_changes_nothing(web: Stack, tmp_path: Path) -> None:
    make_user(web, "operator", Role.READ_WRITE)
    csrf = login_client(web.client, "operator", USER_PASSWORD)
    archive = pack_driver_folder(driver_folder(tmp_path / "shop", version="9.0.0", with_actions=True))

    status, page = _push(web, csrf, archive)

    assert status == 201, page
    assert "Pushed shop 9.0.0." in page
    assert 'aria-labelledby="driver-' in page and "9.0.0" in page
    assert "shop@9.0.0" in _stored(web)
    again_status, again = _push(web, csrf, archive)
    assert again_status == 200 and "already stored with the same content" in again
    assert _stored(web).count("shop@9.0.0") == 1


def test_an_invalid_driver_is_refused_with_each_problem_and_nothing_is_stored(
    web: Stack, tmp_path: Path
) -> None:
    folder = driver_folder(tmp_path / "shop", version="9.1.0", with_actions=True)
    spec = folder / "driver.styrmin.yml"
    spec.write_text(spec.read_text().replace("mode: core", "mode: later"))
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    before = _stored(web)

    status, page = _push(web, csrf, pack_driver_folder(folder))

    assert status == 422
    assert "shop 9.1.0 is not valid; nothing was stored" in page
    assert "driver.styrmin.yml, line" in page and "is not a mode; use pre, core or post." in page
    assert _stored(web) == before


def test_a_read_only_user_cannot_push_and_a_missing_file_is_named(web: Stack, tmp_path: Path) -> None:
    make_user(web, "reader", Role.READ_ONLY)
    csrf = login_client(web.client, "reader", USER_PASSWORD)
    assert 'action="/drivers"' not in web.client.get("/drivers").text
    before = _stored(web)
    archive = pack_driver_folder(driver_folder(tmp_path / "shop", version="9.2.0"))

    status, page = _push(web, csrf, archive)

    assert status == 403 and "this needs Read/write" in page
    assert _stored(web) == before
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    missing = web.client.post("/drivers", data={"csrf_token": csrf})
    assert missing.status_code == 422 and "Choose a driver archive (.tar.gz) to push." in missing.text
    garbage_status, garbage = _push(web, csrf, b"not a tar at all", "notes.txt")
    assert garbage_status == 422 and "nothing was stored" in garbage
    assert _stored(web) == before
