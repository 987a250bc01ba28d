"""The local Prefect server's own SQLite database: a new one is a copy of a database migrated once per
Prefect version, and the server keeps flow runs across restarts."""

from __future__ import annotations

import importlib.metadata
import sqlite3
import uuid
from pathlib import Path

import httpx
import pytest

from styrmin_backend.agent.prefect import LocalPrefectServer

pytestmark = pytest.mark.slow

START_TIMEOUT = 600  # a first start migrates a database; generous on a loaded machine


def _head(database: Path) -> str:
    with sqlite3.connect(database) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(revision)


def _make_flow(server: LocalPrefectServer) -> str:
    response = httpx.post(
        f"{server.api_url}/flows/", json={"name": f"kept-{uuid.uuid4().hex[:8]}"}, timeout=30
    )
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def _has_flow(server: LocalPrefectServer, flow_id: str) -> bool:
    return httpx.get(f"{server.api_url}/flows/{flow_id}", timeout=30).status_code == 200


def test_new_data_folders_start_from_one_migrated_database_and_keep_their_runs(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    version = importlib.metadata.version("prefect")
    first = LocalPrefectServer(tmp_path / "first", template_dir=templates)
    first.start(timeout=START_TIMEOUT)
    try:
        template = templates / f"prefect-{version}.db"
        assert template.is_file()
        assert "Migrations succeeded" in first.log_path.read_text()  # made once, here
        flow_id = _make_flow(first)
        first.stop()
        first.restart(timeout=START_TIMEOUT)  # the same database again: the flow is still there
        assert _has_flow(first, flow_id)
    finally:
        first.stop()

    second = LocalPrefectServer(tmp_path / "second", template_dir=templates)
    second.start(timeout=START_TIMEOUT)
    try:
        assert "Migrations succeeded" not in second.log_path.read_text()  # a copy, not migrated again
        assert _head(second.database_path) == _head(template)
        assert not _has_flow(second, flow_id)  # a database of its own
        _make_flow(second)
    finally:
        second.stop()
    assert (tmp_path / "second" / "prefect-version").read_text() == version


def test_without_a_template_the_server_migrates_its_own_database(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the templates' folder would be")
    server = LocalPrefectServer(tmp_path / "data", template_dir=blocked / "templates")
    server.start(timeout=START_TIMEOUT)
    try:
        _make_flow(server)
        assert "the server migrates its own" in server.log_path.read_text()
    finally:
        server.stop()
    assert (tmp_path / "data" / "prefect-version").read_text() == importlib.metadata.version("prefect")
