"""The worker's whole stack (tests/conftest.py ``whole_stack``), as the driver author's harness gives it."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import styrmin
from styrmin_backend.testing import StyrminStack
from tests.support.drivers import EXAMPLE_DRIVER, driver_folder


@pytest.fixture(scope="session", autouse=True)
def _real_backend() -> Iterator[None]:
    """Tests that call the primitives directly play an action's process: the real backend, wired as
    that process's entry point wires it (the in-memory tests set theirs over it)."""
    from styrmin_backend.actions._backend import set_default_backend
    from styrmin_backend.actions._real import wire_real_backend

    wire_real_backend()
    yield
    set_default_backend(None)


@pytest.fixture(scope="session")
def styrmin_stack(whole_stack: StyrminStack) -> StyrminStack:
    """The harness's fixture name (docs/testing-drivers.md), on the worker's one stack."""
    return whole_stack


@pytest.fixture(scope="session")
def stack(whole_stack: StyrminStack) -> StyrminStack:
    return whole_stack


@pytest.fixture(autouse=True)
def _delete_the_tests_deployments(request: pytest.FixtureRequest) -> Iterator[None]:
    """Delete the deployments a test made on the shared stack once it has ended, as an operator would.

    Left running, their pods would keep running and the stack's agent would keep reporting their
    components every second for the rest of the session. The deletions are only asked for: the
    agent uninstalls them while the next test runs. Tests without the whole stack are left alone.
    """
    if "whole_stack" not in request.fixturenames:
        yield
        return
    client = request.getfixturevalue("whole_stack").client
    before = {deployment.name for deployment in client.deployments.list()}
    yield
    for deployment in client.deployments.list():
        if deployment.name not in before:
            with contextlib.suppress(styrmin.StyrminError):  # e.g. a task of it still running
                client.deployments.delete(deployment.name)


@pytest.fixture
def deployment_name(request: pytest.FixtureRequest) -> str:
    """A deployment (and namespace) name of its own for each test: the stack is shared."""
    return "a" + str(abs(hash(request.node.name)) % 10**8)


EXAMPLE_VERSION = "1.0.0"


def push_example(
    stack: StyrminStack,
    tmp: Path,
    version: str,
    *,
    actions_source: str | None = None,
    actions: list[dict[str, Any]] | None = None,
) -> None:
    """Push the example driver at ``version``: its own actions, or ``actions`` from ``actions_source``.

    At 1.0.0 with its own actions, the example is pushed as it is, as the other modules sharing the
    stack push it (a version pushed again must have the same content).
    """
    if version == EXAMPLE_VERSION and actions_source is None and actions is None:
        stack.push_driver(EXAMPLE_DRIVER)
        return
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
