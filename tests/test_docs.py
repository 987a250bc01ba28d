"""The documentation keeps up with the code."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_every_setting_is_documented() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [
        f"STYRMIN_{name.upper()}" for name in Settings.model_fields if f"`STYRMIN_{name.upper()}`" not in text
    ]
    assert not missing, f"document these settings in docs/configuration.md: {missing}"


def test_every_agent_setting_is_documented() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [
        f"STYRMIN_AGENT_{name.upper()}"
        for name in AgentSettings.model_fields
        if f"`STYRMIN_AGENT_{name.upper()}`" not in text
    ]
    assert not missing, f"document these agent settings in docs/configuration.md: {missing}"


def test_every_shape_in_the_readme_map_is_where_it_says() -> None:
    """The README's map of each concept's shapes names classes that exist in the modules it gives."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### One concept, its shapes", 1)[1].split("\n## ", 1)[0]
    rows = [
        line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ") and "---" not in line
    ]
    missing = []
    for _concept, shapes, module, _why in rows[1:]:
        name = module.strip().strip("`")
        path = name if name.startswith("styrmin.") else f"styrmin_backend.{name}"
        found = importlib.import_module(path)
        for shape in re.findall(r"`(\w+)`", shapes):
            if not hasattr(found, shape):
                missing.append(f"{path}.{shape}")
    assert len(rows) > 30
    assert not missing, f"the README's map names shapes that are not there: {missing}"
