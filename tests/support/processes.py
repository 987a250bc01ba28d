"""Code run by this Python in a process of its own, to see what a fresh process loads and prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_prints(code: str, *, timeout: float = 300) -> str:
    """What ``code`` prints, run in a new process from the repository's root (so ``tests`` imports);
    fails the test with the end of the process's stderr when the process fails."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
