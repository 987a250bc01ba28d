"""The `styrmin-localcluster` command: serves, writes its kubeconfig, stops cleanly, explains bad input."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Namespace

from .conftest import CATALOG

pytestmark = pytest.mark.slow


def test_the_command_serves_until_sigterm_and_saves_its_state(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    kubeconfig = tmp_path / "config" / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "styrmin_localcluster",
            "--data-dir",
            str(tmp_path / "data"),
            "--catalog",
            str(CATALOG),
            "--state-file",
            str(state),
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline() if process.stdout else ""
        assert first.startswith("Local cluster serving on https://127.0.0.1:")
        assert f"export KUBECONFIG={kubeconfig}" in (process.stdout.readline() if process.stdout else "")
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["current-context"] == "localcluster"
        assert kubeconfig.stat().st_mode & 0o077 == 0
        client = Client(KubeConfig.from_file(kubeconfig))
        assert "default" in [n.metadata.name for n in client.list(Namespace)]
        client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    assert state.exists()


def test_a_broken_catalog_is_reported_without_a_traceback(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "images.yaml").write_text(
        "apiVersion: localcluster.styrmin.io/v1\nkind: ImageCatalog\nimages: 3\n"
    )
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "styrmin_localcluster",
            "--data-dir",
            str(tmp_path / "d"),
            "--catalog",
            str(catalog),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"styrmin-localcluster: {catalog / 'images.yaml'}: images must be a list"
    assert time.monotonic() - started < 30
