"""The lifecycle hooks and their modes: part of the driver format, so defined in ``styrmin_drivers.hooks``."""

from __future__ import annotations

from styrmin_drivers.hooks import MODE_ORDER, Hook, Mode, hook_has_driver_core, hook_step_name

HOOK_STEP_NAMES: frozenset[str] = frozenset(
    hook_step_name(hook, mode) for hook in Hook for mode in MODE_ORDER
)
"""The name of every step that runs a hook mode's actions (those steps have action logs)."""

__all__ = ["HOOK_STEP_NAMES", "MODE_ORDER", "Hook", "Mode", "hook_has_driver_core", "hook_step_name"]
