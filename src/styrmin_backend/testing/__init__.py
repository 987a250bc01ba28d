"""Test a driver's actions: in memory in milliseconds, or on a whole Styrmin for acceptance.

The fast path: ``Context(driver_folder).run("upgrade", State(...), target_version="2.0.0")`` runs one
action, unchanged, with the real primitives over an in-memory deployment (versions, configuration,
components, Jobs, how each command ends) and returns a ``Result``: the effects in order, the tasks it
started, the notes, the stored output and the resulting ``State``.

The slow path: ``StyrminStack.start(work_dir, catalogs)`` runs the server, the embedded local cluster,
a Prefect server and the agent in the test process; a test pushes the driver and creates and upgrades a
deployment through ``stack.client`` (the Python SDK). With pytest,
``pytest_plugins = ["styrmin_backend.testing.pytest_plugin"]`` gives a session fixture
``styrmin_stack``. See docs/testing-drivers.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from styrmin_backend.testing._context import Context, Result
from styrmin_backend.testing._memory import (
    ACTIONS_TOKEN,
    CommandOutcome,
    Component,
    ComponentsStarted,
    ComponentsStopped,
    Container,
    DeploymentUpgraded,
    Effect,
    Job,
    JobDeleted,
    JobStarted,
    NoteAdded,
    OutputStored,
    State,
)

if TYPE_CHECKING:
    from styrmin_backend.testing._stack import StyrminStack, describe, hook_step

__all__ = [
    "ACTIONS_TOKEN",
    "CommandOutcome",
    "Component",
    "ComponentsStarted",
    "ComponentsStopped",
    "Container",
    "Context",
    "DeploymentUpgraded",
    "Effect",
    "Job",
    "JobDeleted",
    "JobStarted",
    "NoteAdded",
    "OutputStored",
    "Result",
    "State",
    "StyrminStack",
    "describe",
    "hook_step",
]

_STACK_NAMES = ("StyrminStack", "describe", "hook_step")


def __getattr__(name: str) -> Any:
    # The whole-stack harness imports the local cluster, Prefect's server and the agent: only on use.
    if name in _STACK_NAMES:
        from styrmin_backend.testing import _stack

        return getattr(_stack, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
