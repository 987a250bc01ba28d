"""pytest fixtures of the harness: ``pytest_plugins = ["styrmin_backend.testing.pytest_plugin"]``.

The image catalogs come from ``--styrmin-catalog DIR`` (repeatable) or the ``styrmin_catalogs`` fixture,
which a conftest can override.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from styrmin_backend.testing._stack import StyrminStack


def pytest_configure(config: pytest.Config) -> None:
    # The marker the docs tell authors to put on whole-stack tests: known, so --strict-markers passes.
    config.addinivalue_line(
        "markers", "slow: starts a whole Styrmin (StyrminStack); skip these with -m 'not slow'"
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--styrmin-catalog",
        action="append",
        default=[],
        help="An image catalog folder of the local cluster (repeatable); see docs/localcluster.md.",
    )


@pytest.fixture(scope="session")
def styrmin_catalogs(request: pytest.FixtureRequest) -> list[Path]:
    """The image catalog folders the local cluster runs pods from."""
    return [Path(p) for p in request.config.getoption("--styrmin-catalog")]


@pytest.fixture(scope="session")
def styrmin_stack(
    tmp_path_factory: pytest.TempPathFactory, styrmin_catalogs: list[Path]
) -> Iterator[StyrminStack]:
    """One running Styrmin for the whole session (starting one takes a few seconds)."""
    with StyrminStack.start(tmp_path_factory.mktemp("styrmin"), styrmin_catalogs) as stack:
        yield stack
