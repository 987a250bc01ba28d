"""The lifecycle hooks and their modes: part of the driver format, so defined in ``styrmin_drivers.hooks``."""

from __future__ import annotations

from styrmin_drivers.hooks import MODE_ORDER, Hook, Mode, hook_has_driver_core, hook_step_name

__all__ = ["MODE_ORDER", "Hook", "Mode", "hook_has_driver_core", "hook_step_name"]
