"""Lifecycle hooks, their modes, and the step each mode records on a task."""

from __future__ import annotations

from enum import StrEnum


class Hook(StrEnum):
    """A point in the deployment lifecycle where a driver's actions run."""

    SETUP = "setup"
    UPGRADE = "upgrade"
    BACKUP = "backup"
    RESTORE = "restore"


class Mode(StrEnum):
    """When an action runs within its hook: before, as, or after the main operation."""

    PRE = "pre"
    CORE = "core"
    POST = "post"


MODE_ORDER: tuple[Mode, ...] = (Mode.PRE, Mode.CORE, Mode.POST)
"""Order across modes is fixed: pre finishes before core starts, core before post."""


def hook_step_name(hook: Hook, mode: Mode) -> str:
    """The name of the task step that runs the actions of ``hook`` in ``mode``.

    >>> hook_step_name(Hook.UPGRADE, Mode.CORE)
    'Run the upgrade hook'
    >>> hook_step_name(Hook.SETUP, Mode.PRE)
    'Run the setup pre-hook'
    """
    if mode is Mode.CORE:
        return f"Run the {hook.value} hook"
    return f"Run the {hook.value} {mode.value}-hook"


def hook_has_driver_core(hook: Hook) -> bool:
    """Whether a driver may declare ``core`` actions for ``hook``.

    The setup hook's core is Styrmin's own install, so drivers only add pre and post actions to it.
    """
    return hook is not Hook.SETUP
