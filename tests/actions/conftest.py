"""One Styrmin for the session, started by the driver author's harness, with the example driver's images.

Besides the example driver's catalog, a catalog of this session's own names the shop images without a
registry host (``shop/server``), so that any registry (``registry.local:5000/shop/server:2.0.0``) runs
the example app, as an image pushed to a private registry would.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from styrmin_backend.testing import StyrminStack
from styrmin_backend.testing.pytest_plugin import styrmin_stack  # noqa: F401  (the harness's fixture)
from tests.support.drivers import EXAMPLE_DRIVER, driver_folder

APP = EXAMPLE_DRIVER / "app"


def _any_registry_catalog(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{APP / 'bin'}:/usr/local/bin:/usr/bin:/bin", "SHOP_PYTHON": "{python}"}
    images = [
        {
            "name": "shop/server",
            "entrypoint": ["{python}", str(APP / "shop.py")],
            "cmd": ["serve"],
            "env": env,
        },
        {
            "name": "shop/task-worker",
            "entrypoint": ["{python}", str(APP / "shop.py")],
            "cmd": ["work"],
            "env": env,
        },
    ]
    document = {"apiVersion": "localcluster.styrmin.io/v1", "kind": "ImageCatalog", "images": images}
    (folder / "any-registry.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder


@pytest.fixture(scope="session")
def styrmin_catalogs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The harness's catalogs: the example driver's, and the shop images from any registry."""
    return [EXAMPLE_DRIVER / "catalog", _any_registry_catalog(tmp_path_factory.mktemp("catalog"))]


@pytest.fixture(scope="session")
def stack(styrmin_stack: StyrminStack) -> StyrminStack:  # noqa: F811
    """The harness's session stack (its pytest fixture, ``styrmin_stack``)."""
    return styrmin_stack


@pytest.fixture
def deployment_name(request: pytest.FixtureRequest) -> str:
    """A deployment (and namespace) name of its own for each test: the stack is shared."""
    return "a" + str(abs(hash(request.node.name)) % 10**8)


def push_example(
    stack: StyrminStack,
    tmp: Path,
    version: str,
    *,
    actions_source: str | None = None,
    actions: list[dict[str, Any]] | None = None,
) -> None:
    """Push the example driver at ``version``: its own actions, or ``actions`` from ``actions_source``."""
    folder = driver_folder(
        tmp / f"driver-{version}-{time.monotonic_ns()}", version=version, with_actions=True
    )
    if actions_source is not None:
        (folder / "test_actions.py").write_text(actions_source)
    if actions is not None:
        spec_file = folder / "driver.styrmin.yml"
        spec = yaml.safe_load(spec_file.read_text())
        spec["spec"]["actions"] = actions
        spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    stack.push_driver(folder)
    shutil.rmtree(folder)


def action(name: str, hook: str, mode: str, function: str, file: str = "test_actions.py") -> dict[str, Any]:
    return {"name": name, "hook": hook, "mode": mode, "location": f"{file}::{function}"}
