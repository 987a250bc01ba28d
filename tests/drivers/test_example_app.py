"""The example driver's application: its migration really changes the database a test can read."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.drivers.conftest import EXAMPLE_DRIVER

SHOP = EXAMPLE_DRIVER / "app" / "shop.py"


def _shop(data_dir: Path, image: str, *args: str) -> subprocess.CompletedProcess[str]:
    environment = dict(
        os.environ,
        LOCALCLUSTER_IMAGE=image,
        LOCALCLUSTER_DATA_DIR=str(data_dir),
        SHOP_DATABASE="shop.sqlite3",
        SHOP_MIGRATE_WAIT_SECONDS="0",
    )
    return subprocess.run(
        [sys.executable, str(SHOP), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _schema_version(data_dir: Path) -> str:
    with sqlite3.connect(data_dir / "shop.sqlite3") as connection:
        return str(connection.execute("SELECT version FROM schema").fetchone()[0])


def test_migrate_writes_the_image_version_into_the_shared_database(tmp_path: Path) -> None:
    created = _shop(tmp_path, "registry.local:5000/shop/server:1.0.0", "migrate")
    assert created.returncode == 0, created.stderr
    assert _schema_version(tmp_path) == "1.0.0"

    migrated = _shop(tmp_path, "registry.local:5000/shop/server:2.0.0@sha256:" + "d" * 64, "shop", "migrate")

    assert migrated.returncode == 0, migrated.stderr
    assert "from 1.0.0 to 2.0.0" in migrated.stdout
    assert _schema_version(tmp_path) == "2.0.0"


def test_migrate_refuses_to_go_back_to_an_older_version(tmp_path: Path) -> None:
    assert _shop(tmp_path, "example.com/shop/server:1.10.0", "migrate").returncode == 0

    refused = _shop(tmp_path, "example.com/shop/server:1.9.0", "migrate")

    assert refused.returncode == 4
    assert "Cannot migrate the database from 1.10.0 down to 1.9.0" in refused.stderr
    assert _schema_version(tmp_path) == "1.10.0"
    assert _shop(tmp_path, "example.com/shop/server:1.10.0", "migrate").returncode == 0
    assert _shop(tmp_path, "example.com/shop/server:1.11.0", "migrate").returncode == 0
    assert _schema_version(tmp_path) == "1.11.0"


def test_migrate_refuses_while_a_task_worker_runs(tmp_path: Path) -> None:
    assert _shop(tmp_path, "example.com/shop/server:1.0.0", "migrate").returncode == 0
    environment = dict(
        os.environ,
        LOCALCLUSTER_IMAGE="example.com/shop/task-worker:1.0.0",
        LOCALCLUSTER_DATA_DIR=str(tmp_path),
        SHOP_DATABASE="shop.sqlite3",
    )
    worker = subprocess.Popen(
        [sys.executable, str(SHOP), "work"], env=environment, stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        assert "started" in worker.stdout.readline()
        time.sleep(1.5)  # one heartbeat
        refused = _shop(tmp_path, "example.com/shop/server:2.0.0", "migrate")
        assert refused.returncode == 3
        assert "Stop the task-worker component first" in refused.stderr
        assert _schema_version(tmp_path) == "1.0.0"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=10)

    assert _shop(tmp_path, "example.com/shop/server:2.0.0", "migrate").returncode == 0
    assert _schema_version(tmp_path) == "2.0.0"


def test_catalog_names_every_image_the_chart_renders() -> None:
    catalog = yaml.safe_load((EXAMPLE_DRIVER / "catalog" / "shop.yaml").read_text())
    assert catalog["apiVersion"] == "localcluster.styrmin.io/v1" and catalog["kind"] == "ImageCatalog"
    names = {image["name"] for image in catalog["images"]}
    assert names == {
        "example.com/shop/server",
        "example.com/shop/task-worker",
        "example.com/shop/log-shipper",
    }
    for image in catalog["images"]:
        entrypoint = image["entrypoint"]
        assert entrypoint[0] == "{python}"
        assert (EXAMPLE_DRIVER / "catalog" / entrypoint[1]).resolve() == SHOP
