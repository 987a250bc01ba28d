"""The driver registry: push, re-push, refuse changed content, list, show, download."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from styrmin_backend.domain.limits import DRIVER_CHECK_RETRY_AFTER_SECONDS
from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import pack_driver_folder
from styrmin_backend.services import drivers as drivers_service
from tests.support.drivers import driver_folder
from tests.support.loopback import served

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


# --- Hostile drivers, sent to the server on loopback: it never runs their code, and its work is bounded.

SPEC = """\
apiVersion: styrmin.io/v1
kind: Driver
metadata:
  name: hostile
  version: 1.0.0
spec:
  application:
    name: Hostile
    defaultVersion: "1.0.0"
  components:
    - name: server
      workload:
        kind: Deployment
        name: "{{ .Release.Name }}-server"
  actions:
    - name: upgrade
      hook: upgrade
      mode: core
      location: "actions.py::upgrade"
"""

WORKLOAD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
spec:
  template:
    spec:
      containers:
        - name: server
          image: example.com/hostile:1
"""

ACTIONS = """\
from prefect import flow


@flow
async def upgrade(context) -> None:
    pass
"""

# About 700 bytes that stand for 9**9 values.
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def _archive(spec: str = SPEC, actions: str = ACTIONS, template: str = WORKLOAD, **extra: bytes) -> bytes:
    files = {
        "driver.styrmin.yml": spec.encode(),
        "actions.py": actions.encode(),
        "chart/Chart.yaml": b"apiVersion: v2\nname: hostile\nversion: 0.1.0\n",
        "chart/templates/workload.yaml": template.encode(),
        **extra,
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


@pytest.fixture
def server_url(stack: Stack) -> Iterator[str]:
    """The stack's app served by uvicorn on loopback, as `styrmin server` serves it."""
    with served(stack.client.app) as url:
        yield url


def _send(url: str, path: str, archive: bytes, token: str) -> httpx.Response:
    # Generous: the machine may be loaded; what matters is that an answer comes, and what it says.
    return httpx.post(
        f"{url}/api/v1{path}",
        content=archive,
        headers={"Authorization": f"Bearer {token}", **GZIP},
        timeout=180,
    )


def test_validate_and_push_never_run_the_drivers_code(stack: Stack, server_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "driver-code-ran"
    at_import = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran on the server')\n"
    archive = _archive(actions=at_import + ACTIONS, **{"helpers.py": at_import.encode()})
    reader = stack.make_user("viewer", Role.READ_ONLY)
    writer = stack.make_user("author", Role.READ_WRITE)

    validated = _send(server_url, "/drivers/validate", archive, reader)
    pushed = _send(server_url, "/drivers", archive, writer)

    assert not marker.exists()
    assert validated.status_code == 200, validated.text
    report = validated.json()
    assert report["problems"] == []
    assert [(a["name"], a["location"]) for a in report["actions"]] == [("upgrade", "actions.py::upgrade")]
    assert pushed.status_code == 201, pushed.text
    assert not marker.exists()


def test_action_that_is_not_a_flow_is_reported_with_its_line_without_running_it(
    stack: Stack, server_url: str
) -> None:
    actions = "import os\nos._exit(3)\n\n\ndef upgrade(context):\n    pass\n"
    reader = stack.make_user("viewer", Role.READ_ONLY)

    validated = _send(server_url, "/drivers/validate", _archive(actions=actions), reader)

    assert validated.status_code == 200, validated.text
    assert [p["message"] for p in validated.json()["problems"]] == [
        "actions.py::upgrade (actions.py, line 5) is not a Prefect flow; decorate it with @flow "
        "(from prefect import flow)."
    ]


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (_archive(SPEC + ALIAS_BOMB), "values once its aliases (*name) are expanded"),
        (_archive(SPEC + "x: " + "[" * 50_000 + "]" * 50_000 + "\n"), "nested more than 100 deep"),
        (_archive(**{"chart/x": b"a file", "chart/x/y": b"a file inside"}), "a path is either a file or"),
        (
            _archive(template=WORKLOAD + "---\napiVersion: v1\nkind: ConfigMap\ndata:\n  " + ALIAS_BOMB),
            "renders too much",
        ),
    ],
    ids=["alias-bomb", "nested-50000-deep", "file-and-folder", "alias-bomb-rendered-by-the-chart"],
)
def test_hostile_drivers_are_refused_with_a_message_while_other_requests_are_answered(
    stack: Stack, server_url: str, archive: bytes, message: str
) -> None:
    writer = stack.make_user("author", Role.READ_WRITE)
    others: list[int] = []
    done, asking = threading.Event(), threading.Event()

    def ask_meanwhile() -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {writer}"}, timeout=60) as client:
            while not done.is_set():
                others.append(client.get(f"{server_url}/api/v1/deployments").status_code)
                asking.set()
                time.sleep(0.05)

    meanwhile = threading.Thread(target=ask_meanwhile)
    meanwhile.start()
    assert asking.wait(120), "the other requests never got an answer"
    try:
        pushed = _send(server_url, "/drivers", archive, writer)
        validated = _send(server_url, "/drivers/validate", archive, writer)
    finally:
        done.set()
        meanwhile.join()

    assert pushed.status_code == 422, pushed.text
    assert message in pushed.json()["message"]
    assert any(message in p["message"] for p in validated.json()["problems"])
    assert others and set(others) == {200}
    assert stack.client.get("/api/v1/drivers", headers=stack.headers(writer)).json() == []


def test_gzip_bomb_is_refused(stack: Stack, server_url: str) -> None:
    header = tarfile.TarInfo("chart/zeros")
    header.size = 1024**3
    bomb = gzip.compress(header.tobuf()) + gzip.compress(b"\0" * (1024 * 1024)) * 1025
    writer = stack.make_user("author", Role.READ_WRITE)

    pushed = _send(server_url, "/drivers", bomb, writer)

    assert pushed.status_code == 422, pushed.text
    assert "hold more than 128 MiB" in pushed.json()["message"]


def test_chart_that_renders_too_much_is_refused_and_not_stored(stack: Stack, server_url: str) -> None:
    big = (
        "{{- range $i := until 200 }}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        '  name: big-{{ $i }}\ndata:\n  blob: {{ repeat 100000 "a" | quote }}\n{{- end }}\n'
    )  # about 20 MB
    writer = stack.make_user("author", Role.READ_WRITE)

    pushed = _send(server_url, "/drivers", _archive(template=WORKLOAD + "---\n" + big), writer)

    assert pushed.status_code == 422, pushed.text
    assert "more than the 16 MiB Styrmin applies; render less" in pushed.json()["message"]
    assert stack.client.get("/api/v1/drivers", headers=stack.headers(writer)).json() == []


def test_checks_past_the_servers_limit_are_answered_429_with_retry_after(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    slots = threading.BoundedSemaphore(1)
    monkeypatch.setattr(drivers_service, "_check_slots", slots)
    reader = stack.headers(stack.make_user("viewer", Role.READ_ONLY))
    slots.acquire()  # another check is running
    try:
        busy = stack.client.post("/api/v1/drivers/validate", content=_archive(), headers={**reader, **GZIP})
    finally:
        slots.release()
    free = stack.client.post("/api/v1/drivers/validate", content=_archive(), headers={**reader, **GZIP})

    assert busy.status_code == 429
    assert busy.headers["Retry-After"] == str(DRIVER_CHECK_RETRY_AFTER_SECONDS)
    assert "send the driver again" in busy.json()["message"]
    assert free.status_code == 200 and free.json()["problems"] == []
