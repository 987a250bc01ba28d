"""The documentation keeps up with the code."""

from __future__ import annotations

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
