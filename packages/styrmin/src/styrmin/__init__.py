"""Styrmin's Python SDK: ``Client`` and ``AsyncClient`` for the REST API, typed models and exceptions.

>>> import styrmin
>>> client = styrmin.Client()  # reads STYRMIN_URL and STYRMIN_TOKEN  # doctest: +SKIP
>>> client.deployments.get("shop").app_version  # doctest: +SKIP
'1.0.0'

The command line, ``styrminctl``, is built on it (``styrmin.cli``).
"""

# The names load on first use, so that `styrminctl --help` starts without httpx and pydantic.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from styrmin._async_client import AsyncClient
    from styrmin._calls import driver_archive
    from styrmin._client import Client
    from styrmin._environment import TOKEN_ENV, URL_ENV
    from styrmin.errors import (
        APIError,
        AuthenticationError,
        BadRequestError,
        ConfigurationError,
        ConflictError,
        FieldError,
        ForbiddenError,
        InvalidDriverError,
        NotFoundError,
        PayloadTooLargeError,
        ServerError,
        StyrminConnectionError,
        StyrminError,
        TaskFailedError,
        ValidationError,
        WaitTimeoutError,
    )
    from styrmin.models import (
        Agent,
        AgentKey,
        AgentProcess,
        Backup,
        BackupChange,
        BackupFile,
        BackupLocation,
        BackupSchedule,
        Change,
        ClusterBackupLocation,
        Configuration,
        Deployment,
        DeploymentStatus,
        Driver,
        DriverAction,
        DriverApplication,
        DriverComponent,
        DriverProblem,
        DriverPush,
        DriverReport,
        Hook,
        IssuedToken,
        Mode,
        PasswordReset,
        Role,
        StartedBy,
        StartedTask,
        Step,
        StepStatus,
        Task,
        TaskPage,
        TaskStatus,
        TaskSummary,
        TaskType,
        User,
        Waiting,
        WhoAmI,
    )

_WHERE = {
    "APIError": "styrmin.errors",
    "Agent": "styrmin.models",
    "AgentKey": "styrmin.models",
    "AgentProcess": "styrmin.models",
    "AsyncClient": "styrmin._async_client",
    "AuthenticationError": "styrmin.errors",
    "BadRequestError": "styrmin.errors",
    "Backup": "styrmin.models",
    "BackupChange": "styrmin.models",
    "BackupFile": "styrmin.models",
    "BackupLocation": "styrmin.models",
    "BackupSchedule": "styrmin.models",
    "Change": "styrmin.models",
    "ClusterBackupLocation": "styrmin.models",
    "Client": "styrmin._client",
    "Configuration": "styrmin.models",
    "ConfigurationError": "styrmin.errors",
    "ConflictError": "styrmin.errors",
    "Deployment": "styrmin.models",
    "DeploymentStatus": "styrmin._enums",
    "Driver": "styrmin.models",
    "DriverAction": "styrmin.models",
    "DriverApplication": "styrmin.models",
    "DriverComponent": "styrmin.models",
    "DriverProblem": "styrmin.models",
    "DriverPush": "styrmin.models",
    "DriverReport": "styrmin.models",
    "FieldError": "styrmin.errors",
    "ForbiddenError": "styrmin.errors",
    "Hook": "styrmin._enums",
    "InvalidDriverError": "styrmin.errors",
    "IssuedToken": "styrmin.models",
    "Mode": "styrmin._enums",
    "NotFoundError": "styrmin.errors",
    "PasswordReset": "styrmin.models",
    "PayloadTooLargeError": "styrmin.errors",
    "Role": "styrmin._enums",
    "ServerError": "styrmin.errors",
    "StartedBy": "styrmin.models",
    "StartedTask": "styrmin.models",
    "Step": "styrmin.models",
    "StepStatus": "styrmin._enums",
    "StyrminConnectionError": "styrmin.errors",
    "StyrminError": "styrmin.errors",
    "TOKEN_ENV": "styrmin._environment",
    "Task": "styrmin.models",
    "TaskFailedError": "styrmin.errors",
    "TaskPage": "styrmin.models",
    "TaskStatus": "styrmin._enums",
    "TaskSummary": "styrmin.models",
    "TaskType": "styrmin._enums",
    "URL_ENV": "styrmin._environment",
    "User": "styrmin.models",
    "ValidationError": "styrmin.errors",
    "Waiting": "styrmin.models",
    "WaitTimeoutError": "styrmin.errors",
    "WhoAmI": "styrmin.models",
    "driver_archive": "styrmin._calls",
}


def __getattr__(name: str) -> Any:
    """Import what ``name`` lives in on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'styrmin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "TOKEN_ENV",
    "URL_ENV",
    "APIError",
    "Agent",
    "AgentKey",
    "AgentProcess",
    "AsyncClient",
    "AuthenticationError",
    "Backup",
    "BackupChange",
    "BackupFile",
    "BackupLocation",
    "BackupSchedule",
    "BadRequestError",
    "Change",
    "Client",
    "ClusterBackupLocation",
    "Configuration",
    "ConfigurationError",
    "ConflictError",
    "Deployment",
    "DeploymentStatus",
    "Driver",
    "DriverAction",
    "DriverApplication",
    "DriverComponent",
    "DriverProblem",
    "DriverPush",
    "DriverReport",
    "FieldError",
    "ForbiddenError",
    "Hook",
    "InvalidDriverError",
    "IssuedToken",
    "Mode",
    "NotFoundError",
    "PasswordReset",
    "PayloadTooLargeError",
    "Role",
    "ServerError",
    "StartedBy",
    "StartedTask",
    "Step",
    "StepStatus",
    "StyrminConnectionError",
    "StyrminError",
    "Task",
    "TaskFailedError",
    "TaskPage",
    "TaskStatus",
    "TaskSummary",
    "TaskType",
    "User",
    "ValidationError",
    "WaitTimeoutError",
    "Waiting",
    "WhoAmI",
    "driver_archive",
]
