"""Two drivers in one test process each run their own modules: a ``helpers.py`` of one driver is never
the other's, whether the action file imports it at its top or an action imports it when it runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from styrmin_backend.testing import Context, State
from tests.support.drivers import EXAMPLE_DRIVER

ACTIONS = """\
from prefect import flow

import helpers


@flow
async def which(context):
    return helpers.NAME


@flow
async def which_lazily(context):
    import lazy_helpers

    return lazy_helpers.NAME
"""


def driver_with_helpers(folder: Path, name: str) -> Path:
    """A driver whose actions return the NAME of its own helpers.py and lazy_helpers.py."""
    spec = yaml.safe_load((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
    spec["metadata"]["name"] = name
    spec["spec"]["actions"] = [
        {"name": "which", "hook": "upgrade", "mode": "core", "location": "actions.py::which"},
        {"name": "which_lazily", "hook": "upgrade", "mode": "pre", "location": "actions.py::which_lazily"},
    ]
    folder.mkdir()
    (folder / "driver.styrmin.yml").write_text(yaml.safe_dump(spec))
    (folder / "actions.py").write_text(ACTIONS)
    (folder / "helpers.py").write_text(f"NAME = {name!r}\n")
    (folder / "lazy_helpers.py").write_text(f"NAME = {name!r}\n")
    return folder


@pytest.mark.parametrize(
    "action",
    ["which", "which_lazily"],
    ids=["imported-with-the-action-file", "imported-when-the-action-runs"],
)
def test_each_driver_runs_its_own_helpers_module(tmp_path: Path, action: str) -> None:
    first = Context(driver_with_helpers(tmp_path / "first", "first"))
    second = Context(driver_with_helpers(tmp_path / "second", "second"))
    state = State(app_version="1.0.0")

    assert first.run(action, state).returned == "first"
    assert second.run(action, state).returned == "second"
    assert first.run(action, state).returned == "first"


def test_a_drivers_modules_are_not_left_importable_after_its_action(tmp_path: Path) -> None:
    folder = driver_with_helpers(tmp_path / "first", "first")
    path_before = list(sys.path)
    before = sys.modules.get("helpers")  # another test's driver may have left one: it stays as it was

    assert Context(folder).run("which", State(app_version="1.0.0")).error is None

    assert sys.modules.get("helpers") is before
    assert sys.path == path_before
