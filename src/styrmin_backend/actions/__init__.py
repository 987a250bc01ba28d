"""What a driver's actions import: the context Styrmin passes them and the built-in primitives."""

from styrmin_backend.actions.backups import create_backup, execute_backup_commands
from styrmin_backend.actions.commands import CommandResult, execute_commands
from styrmin_backend.actions.components import (
    start_components,
    stop_components,
    upgrade_deployment_version,
)
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError, CommandFailed
from styrmin_backend.actions.images import get_component_images

__all__ = [
    "ActionError",
    "CommandFailed",
    "CommandResult",
    "GlobalContext",
    "create_backup",
    "execute_backup_commands",
    "execute_commands",
    "get_component_images",
    "start_components",
    "stop_components",
    "upgrade_deployment_version",
]
