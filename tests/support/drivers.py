"""Driver folders for tests, made from the example driver so that there is one chart to keep."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

EXAMPLE_DRIVER = Path(__file__).resolve().parents[2] / "examples" / "drivers" / "shop"


def driver_folder(
    target: Path, *, version: str = "1.0.0", with_actions: bool = False, description: str | None = None
) -> Path:
    """A copy of the example driver at ``version``; without its actions unless ``with_actions``."""
    shutil.copytree(EXAMPLE_DRIVER, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    spec_file = target / "driver.styrmin.yml"
    spec: dict[str, Any] = yaml.safe_load(spec_file.read_text())
    spec["metadata"]["version"] = version
    if description is not None:
        spec["metadata"]["description"] = description
    if not with_actions:
        spec["spec"]["actions"] = []
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    return target
