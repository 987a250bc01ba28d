"""The harness's pytest plugin registers the ``slow`` marker that docs/testing-drivers.md tells driver
authors to put on their whole-stack tests, so a suite run with --strict-markers accepts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AUTHORS_CONFTEST = 'pytest_plugins = ["styrmin_backend.testing.pytest_plugin"]\n'
AUTHORS_TESTS = """\
import pytest


@pytest.mark.slow
def test_on_the_whole_stack():
    pass
"""


def test_an_authors_slow_test_passes_with_strict_markers(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(AUTHORS_CONFTEST)  # as docs/testing-drivers.md says
    (tmp_path / "test_driver.py").write_text(AUTHORS_TESTS)

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--strict-markers",
            "-p",
            "no:cacheprovider",
            "test_driver.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
