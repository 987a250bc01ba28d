"""The SDK's enumerations stay equal to the server's: a new status or task type reaches both."""

from __future__ import annotations

from enum import StrEnum

import pytest

import styrmin.models
from styrmin_backend.domain import roles, status, tasks
from styrmin_drivers import hooks


def _members(enum: type[StrEnum]) -> dict[str, str]:
    return {member.name: member.value for member in enum}


@pytest.mark.parametrize(
    ("sdk", "server"),
    [
        (styrmin.models.Role, roles.Role),
        (styrmin.models.TaskType, tasks.TaskType),
        (styrmin.models.TaskStatus, tasks.TaskStatus),
        (styrmin.models.StepStatus, tasks.TaskStatus),
        (styrmin.models.DeploymentStatus, status.DeploymentStatus),
        (styrmin.models.Hook, hooks.Hook),
        (styrmin.models.Mode, hooks.Mode),
    ],
    ids=lambda enum: f"{enum.__module__}.{enum.__name__}",
)
def test_the_sdk_enum_has_the_servers_members(sdk: type[StrEnum], server: type[StrEnum]) -> None:
    assert _members(sdk) == _members(server), (
        f"{sdk.__module__}.{sdk.__name__} differs from {server.__module__}.{server.__name__}: "
        "change packages/styrmin/src/styrmin/_enums.py to match the server"
    )


def test_a_status_the_server_sends_reads_in_the_sdk() -> None:
    """Every value the server can answer parses into the SDK's enum (not only the same names)."""
    for value in status.DeploymentStatus:
        assert styrmin.models.DeploymentStatus(value.value).value == value.value
    for task_status in tasks.TaskStatus:
        assert styrmin.models.TaskStatus(task_status.value).ended == task_status.ended
