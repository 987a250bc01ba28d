"""The driver registry: push, re-push, refuse changed content, list, show, download."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import pack_driver_folder
from tests.support.drivers import driver_folder

from .conftest import Stack

GZIP = {"Content-Type": "application/gzip"}


def _push(stack: Stack, archive: bytes, headers: dict[str, str]):  # type: ignore[no-untyped-def]
    return stack.client.post("/api/v1/drivers", content=archive, headers={**headers, **GZIP})


def test_push_stores_the_version_and_shows_its_components_and_actions(stack: Stack, tmp_path: Path) -> None:
    headers = stack.headers(stack.make_user("author", Role.READ_WRITE))
    archive = pack_driver_folder(driver_folder(tmp_path / "shop", version="1.2.0"))
    response = _push(stack, archive, headers)
    assert response.status_code == 201, response.text
    shown = stack.client.get("/api/v1/drivers/shop/versions/1.2.0", headers=headers).json()
    assert shown["checksum"].startswith("sha256:")
    assert shown["pushed_by"] == "author"
    assert [c["name"] for c in shown["components"]] == ["server", "task-worker"]
    assert shown["application"]["default_version"] == "1.0.0"
    assert [
        (d["name"], d["version"]) for d in stack.client.get("/api/v1/drivers", headers=headers).json()
    ] == [("shop", "1.2.0")]
    download = stack.client.get("/api/v1/drivers/shop/versions/1.2.0/archive", headers=headers)
    assert download.headers["content-type"] == "application/gzip"
    assert download.content == archive
    with tarfile.open(fileobj=io.BytesIO(download.content)) as tar:
        assert "driver.styrmin.yml" in tar.getnames()


def test_repush_of_the_same_content_is_accepted_and_changes_nothing(stack: Stack, tmp_path: Path) -> None:
    headers = stack.headers(stack.token_for("admin"))
    archive = pack_driver_folder(driver_folder(tmp_path / "shop"))
    first = _push(stack, archive, headers)
    again = _push(stack, archive, headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["checksum"] == again.json()["checksum"]
    assert len(stack.client.get("/api/v1/drivers", headers=headers).json()) == 1


def test_repush_of_a_version_with_other_content_is_refused(stack: Stack, tmp_path: Path) -> None:
    headers = stack.headers(stack.token_for("admin"))
    _push(stack, pack_driver_folder(driver_folder(tmp_path / "a")), headers)
    changed = pack_driver_folder(driver_folder(tmp_path / "b", description="Something else"))
    response = _push(stack, changed, headers)
    assert response.status_code == 409
    assert "already stored with other content" in response.json()["message"]
    assert "Raise metadata.version" in response.json()["message"]
    stored = stack.client.get("/api/v1/drivers/shop/versions/1.0.0", headers=headers).json()
    assert stored["description"] != "Something else"


def test_invalid_driver_is_refused_listing_every_problem_with_its_line(stack: Stack, tmp_path: Path) -> None:
    folder = driver_folder(tmp_path / "shop")
    spec = folder / "driver.styrmin.yml"
    spec.write_text(
        spec.read_text()
        + "  actions:\n"
        + "    - {name: a, hook: later, mode: core, location: actions.py::upgrade}\n"
        + "    - {name: b, hook: setup, mode: soon, location: actions.py::upgrade}\n"
    )
    headers = stack.headers(stack.token_for("admin"))
    response = _push(stack, pack_driver_folder(folder), headers)
    assert response.status_code == 422, response.text
    body = response.json()
    fields = [e["field"] for e in body["errors"]]
    assert any("spec.actions[0].hook" in f and "line" in f for f in fields), fields
    assert any("spec.actions[1].mode" in f for f in fields), fields
    assert stack.client.get("/api/v1/drivers", headers=headers).json() == []


def test_garbage_is_refused_as_bad_input(stack: Stack) -> None:
    headers = stack.headers(stack.token_for("admin"))
    response = _push(stack, b"not a tarball", headers)
    assert response.status_code == 422
    assert response.json()["message"]


def test_validate_reports_without_storing(stack: Stack, tmp_path: Path) -> None:
    headers = stack.headers(stack.make_user("viewer", Role.READ_ONLY))
    archive = pack_driver_folder(driver_folder(tmp_path / "shop"))
    report = stack.client.post(
        "/api/v1/drivers/validate", content=archive, headers={**headers, **GZIP}
    ).json()
    assert report["problems"] == [] and report["name"] == "shop"
    assert stack.client.get("/api/v1/drivers", headers=headers).json() == []


def test_create_deployment_uses_the_pushed_driver(stack: Stack, tmp_path: Path) -> None:
    headers = stack.headers(stack.token_for("admin"))
    archive = pack_driver_folder(driver_folder(tmp_path / "shop"))
    assert hashlib.sha256(archive).hexdigest()
    _push(stack, archive, headers)
    response = stack.client.post(
        "/api/v1/deployments",
        json={
            "name": "shop",
            "namespace": "shop",
            "driver": "shop",
            "driver_version": "1.0.0",
            "configuration": {"images": {"server": "registry.local:5000/shop/server:{{ app.version }}"}},
        },
        headers=headers,
    )
    assert response.status_code == 202, response.text
    assert response.json()["deployment"]["configuration"]["images"]["server"].endswith("{{ app.version }}")
