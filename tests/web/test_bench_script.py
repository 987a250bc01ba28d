"""The page benchmark keeps working: it seeds, serves and reads every page it times (no timing here;
a shorter history than the benchmark's 1,000 tasks keeps it quick)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench" / "web_pages.py"


def test_the_page_benchmark_runs_and_prints_a_figure_per_page() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "3", "--tasks", "100"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("sqlite: seeded 100 tasks and a task of 50 steps")
    for page in (
        "deployment page (100 tasks, latest of 50 steps)",
        "task view (50 steps)",
        "deployments list",
    ):
        assert any(line.startswith(f"{page}: p50 ") for line in lines), done.stdout
