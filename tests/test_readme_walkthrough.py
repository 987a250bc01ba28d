"""The README's walkthrough works as printed: each line, run by a shell against `styrmin up`.

Only what differs on a test machine is changed: the port (a free one, not 8080), the data dir (the
test's, not ~/.local/share/styrmin) and styrminctl's config file; `uv run --no-dev styrminctl` is run
as this environment's styrminctl (the same installed script that uv would run).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_styrmin_up import running

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STEP_SECONDS = 900  # a create, upgrade, backup or restore on a busy machine


def walkthrough_lines() -> list[str]:
    """The shell lines between the README's walkthrough markers."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- walkthrough:.*?-->\n```sh\n(.*?)```\n<!-- /walkthrough -->", text, re.S)
    assert block, "README.md lost its walkthrough block (the markers around it)"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_walkthrough_has_every_step_of_a_newcomers_path() -> None:
    text = "\n".join(walkthrough_lines())
    for step in (
        "login",
        "deployments create",
        "deployments upgrade",
        "backups create",
        "deployments restore",
    ):
        assert f"styrminctl {step}" in text


def test_the_readme_walkthrough_creates_upgrades_backs_up_and_restores(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ctl = str(Path(sys.executable).parent / "styrminctl")
    with running("up", {"STYRMIN_DATA_DIR": str(data)}, tmp_path / "up.log") as up:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("STYRMIN")},
            "STYRMINCTL_CONFIG": str(tmp_path / "styrminctl.yaml"),
            "STYRMINCTL_POLL_INTERVAL": "0.5",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        for line in walkthrough_lines():
            command = (
                line.replace("uv run --no-dev styrminctl", ctl)
                .replace("http://127.0.0.1:8080", up.url)
                .replace("~/.local/share/styrmin", str(data))
            )
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", command],
                env=env,
                capture_output=True,
                text=True,
                timeout=STEP_SECONDS,
                cwd=ROOT,
            )
            assert result.returncode == 0, (
                f"README line failed ({result.returncode}): {line}\n{result.stdout}\n{result.stderr}\n"
                f"styrmin up printed:\n{up.output[-4000:]}"
            )
