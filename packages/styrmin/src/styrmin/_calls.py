"""Every call of the API, built once for the sync and the async client."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from styrmin._http import Call, model, no_content, raw_content
from styrmin.errors import ConfigurationError, FieldError, InvalidDriverError
from styrmin.models import (
    Agent,
    AgentKey,
    Backup,
    BackupChange,
    BackupLocation,
    BackupSchedule,
    Change,
    ClusterBackupLocation,
    Configuration,
    Deployment,
    Driver,
    DriverPush,
    DriverReport,
    IssuedToken,
    PasswordReset,
    Role,
    Task,
    TaskPage,
    TaskStatus,
    TaskType,
    User,
    WhoAmI,
)

DriverSource = str | os.PathLike[str] | bytes
"""A driver folder, a ``.tar.gz`` file, or the bytes of a ``.tar.gz``."""
ConfigurationLike = Configuration | dict[str, Any]


def _seg(value: str | int) -> str:
    """``value`` as one path segment (a name can never reach another route).

    Raises:
        ConfigurationError: ``value`` cannot name anything (empty, ``.``, ``..`` or holding ``/``):
            sent, it would reach another route, or none.
    """
    text = str(value)
    if text in ("", ".", "..") or "/" in text:
        raise ConfigurationError(
            f'"{text}" cannot name anything in Styrmin (a name is not empty, ".", ".." and holds no "/"); '
            "give the name of a deployment, driver, user or the id of a task or backup."
        )
    return quote(text, safe="")


def driver_archive(source: DriverSource) -> bytes:
    """The ``.tar.gz`` of a driver folder (packed as the server stores it), a file, or bytes as given.

    Raises:
        InvalidDriverError: the folder cannot be packed (symlinks, special files, too large) or the
            path does not exist.
    """
    if isinstance(source, bytes | bytearray):
        return bytes(source)
    path = Path(source)
    if path.is_dir():
        from styrmin_drivers.package import pack_driver_folder
        from styrmin_drivers.report import DriverError

        try:
            return pack_driver_folder(path)
        except DriverError as error:
            raise InvalidDriverError(
                f"The driver folder {path} cannot be packed: {error.problems[0] if error.problems else error}",
                errors=[FieldError(str(p).removesuffix(f": {p.message}"), p.message) for p in error.problems],
            ) from None
    if path.is_file():
        return path.read_bytes()
    raise InvalidDriverError(f"{path}: no such folder or file; give a driver folder or a .tar.gz.")


# --- auth --------------------------------------------------------------------------------------


def login(
    username: str, password: str, token_name: str | None, expires_in_seconds: int | None
) -> Call[IssuedToken]:
    body: dict[str, Any] = {"username": username, "password": password}
    if token_name is not None:
        body["token_name"] = token_name
    if expires_in_seconds is not None:
        body["expires_in_seconds"] = expires_in_seconds
    return Call("POST", "/auth/login", model(IssuedToken), json=body)


def logout() -> Call[None]:
    return Call("POST", "/auth/logout", no_content)


def whoami() -> Call[WhoAmI]:
    return Call("GET", "/whoami", model(WhoAmI))


# --- drivers -----------------------------------------------------------------------------------

_GZIP = {"Content-Type": "application/gzip"}


def _pushed(response: httpx.Response) -> DriverPush:
    return DriverPush(
        created=response.status_code == 201, driver=Driver.model_validate_json(response.content)
    )


def push_driver(archive: bytes) -> Call[DriverPush]:
    return Call("POST", "/drivers", _pushed, content=archive, headers=_GZIP)


def validate_driver(archive: bytes) -> Call[DriverReport]:
    return Call("POST", "/drivers/validate", model(DriverReport), content=archive, headers=_GZIP)


def _filters(**values: str | None) -> dict[str, str]:
    return {name: value for name, value in values.items() if value is not None}


def list_drivers(name: str | None = None) -> Call[list[Driver]]:
    return Call("GET", "/drivers", model(list[Driver]), params=_filters(name=name), pages=True)


def get_driver(name: str, version: str) -> Call[Driver]:
    return Call("GET", f"/drivers/{_seg(name)}/versions/{_seg(version)}", model(Driver))


def download_driver(name: str, version: str) -> Call[bytes]:
    return Call(
        "GET",
        f"/drivers/{_seg(name)}/versions/{_seg(version)}/archive",
        raw_content,
        headers={"Accept": "application/gzip"},
    )


# --- deployments -------------------------------------------------------------------------------


def _configuration(configuration: ConfigurationLike | None) -> dict[str, Any]:
    """The configuration to send; raises ConfigurationError (nothing is sent) naming what is wrong."""
    from pydantic import ValidationError as ModelError

    if configuration is None:
        return Configuration().model_dump(mode="json")
    if isinstance(configuration, Configuration):
        return configuration.model_dump(mode="json")
    if not isinstance(configuration, Mapping):
        raise ConfigurationError(
            "A configuration is a styrmin.Configuration or a mapping with values, images and env; "
            f"not {type(configuration).__name__}."
        )
    unknown = set(configuration) - {"values", "images", "env"}
    if unknown:
        raise ConfigurationError(
            f"A configuration has only values, images and env; not {', '.join(sorted(map(str, unknown)))}."
        )
    try:
        return Configuration.model_validate(configuration).model_dump(mode="json")
    except ModelError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "configuration"
        raise ConfigurationError(f"The configuration's {where}: {first['msg']}.") from None


def list_deployments(
    status: str | None = None, driver: str | None = None, cluster: str | None = None
) -> Call[list[Deployment]]:
    params = _filters(status=status, driver=driver, cluster=cluster)
    return Call("GET", "/deployments", model(list[Deployment]), params=params, pages=True)


def get_deployment(name: str) -> Call[Deployment]:
    return Call("GET", f"/deployments/{_seg(name)}", model(Deployment))


def create_deployment(
    name: str,
    namespace: str,
    driver: str,
    driver_version: str,
    app_version: str | None,
    configuration: ConfigurationLike | None,
    cluster: str | None = None,
) -> Call[Change]:
    body: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "driver": driver,
        "driver_version": driver_version,
        "configuration": _configuration(configuration),
    }
    if app_version is not None:
        body["app_version"] = app_version
    if cluster is not None:
        body["cluster"] = cluster
    return Call("POST", "/deployments", model(Change), json=body)


def _with_origin(body: dict[str, Any], started_by_step: int | None) -> dict[str, Any]:
    if started_by_step is not None:
        body["started_by_step"] = started_by_step
    return body


def upgrade_deployment(
    name: str, app_version: str | None, driver_version: str | None, started_by_step: int | None
) -> Call[Change]:
    if app_version is None and driver_version is None:
        raise ConfigurationError("An upgrade needs app_version, driver_version or both.")
    body: dict[str, Any] = {}
    if app_version is not None:
        body["app_version"] = app_version
    if driver_version is not None:
        body["driver_version"] = driver_version
    # Idempotent (the seed's upgrade_deployment_version): again, it finds the deployment at that version.
    return Call(
        "POST",
        f"/deployments/{_seg(name)}/upgrade",
        model(Change),
        json=_with_origin(body, started_by_step),
        idempotent=True,
    )


def configure_deployment(name: str, configuration: ConfigurationLike) -> Call[Change]:
    return Call(
        "PUT", f"/deployments/{_seg(name)}/configuration", model(Change), json=_configuration(configuration)
    )


def set_components(
    name: str, components: Sequence[str], running: bool, started_by_step: int | None
) -> Call[Change]:
    if isinstance(components, str):
        components = [components]
    verb = "start" if running else "stop"
    body = _with_origin({"components": list(components)}, started_by_step)
    # Idempotent (the seed's stop_components and start_components): it asks for a state, not a step.
    return Call("POST", f"/deployments/{_seg(name)}/{verb}", model(Change), json=body, idempotent=True)


def delete_deployment(name: str) -> Call[Change]:
    return Call("DELETE", f"/deployments/{_seg(name)}", model(Change))


# --- backups -----------------------------------------------------------------------------------


def list_backups(deployment: str | None = None, status: str | None = None) -> Call[list[Backup]]:
    if deployment is not None and status is None:
        # The deployment's own list: an action's token may read it (not the list of every backup).
        return Call("GET", f"/deployments/{_seg(deployment)}/backups", model(list[Backup]), pages=True)
    params = _filters(deployment=deployment, status=status)
    return Call("GET", "/backups", model(list[Backup]), params=params, pages=True)


def get_backup(backup_id: int) -> Call[Backup]:
    return Call("GET", f"/backups/{_seg(backup_id)}", model(Backup))


def create_backup(name: str, started_by_step: int | None) -> Call[BackupChange]:
    body = _with_origin({}, started_by_step)
    return Call("POST", f"/deployments/{_seg(name)}/backups", model(BackupChange), json=body)


def delete_backup(backup_id: int) -> Call[Change]:
    return Call("DELETE", f"/backups/{_seg(backup_id)}", model(Change))


def get_backup_schedule(name: str) -> Call[BackupSchedule]:
    return Call("GET", f"/deployments/{_seg(name)}/backup-schedule", model(BackupSchedule))


def set_backup_schedule(
    name: str, cron: str, keep_count: int | None, keep_days: int | None
) -> Call[BackupSchedule]:
    body = {"cron": cron, "keep_count": keep_count, "keep_days": keep_days}
    return Call("PUT", f"/deployments/{_seg(name)}/backup-schedule", model(BackupSchedule), json=body)


def remove_backup_schedule(name: str) -> Call[None]:
    return Call("DELETE", f"/deployments/{_seg(name)}/backup-schedule", no_content)


def get_backup_location(cluster: str) -> Call[ClusterBackupLocation]:
    return Call("GET", f"/clusters/{_seg(cluster)}/backup-location", model(ClusterBackupLocation))


def set_backup_location(cluster: str, body: dict[str, Any]) -> Call[BackupLocation]:
    sent = {key: value for key, value in body.items() if value is not None}
    return Call("PUT", f"/clusters/{_seg(cluster)}/backup-location", model(BackupLocation), json=sent)


def restore_deployment(name: str, backup_id: int, from_deployment: str | None = None) -> Call[Change]:
    body: dict[str, Any] = {"backup_id": backup_id}
    if from_deployment is not None:
        body["from_deployment"] = from_deployment
    return Call("POST", f"/deployments/{_seg(name)}/restore", model(Change), json=body)


# --- tasks -------------------------------------------------------------------------------------


def list_tasks(
    deployment: str | None,
    type: TaskType | str | None,
    status: TaskStatus | str | None,
    limit: int | None,
    before: int | None,
) -> Call[TaskPage]:
    params = {
        key: str(value)
        for key, value in {
            "deployment": deployment,
            "type": type,
            "status": status,
            "limit": limit,
            "before": before,
        }.items()
        if value is not None
    }
    return Call("GET", "/tasks", model(TaskPage), params=params)


def get_task(task_id: int, wait_until_end: float = 0) -> Call[Task]:
    params = {"wait_until_end": f"{wait_until_end:g}"} if wait_until_end > 0 else None
    return Call("GET", f"/tasks/{_seg(int(task_id))}", model(Task), params=params)


def retry_task(task_id: int) -> Call[Change]:
    return Call("POST", f"/tasks/{_seg(int(task_id))}/retry", model(Change))


def cancel_task(task_id: int) -> Call[Task]:
    return Call("POST", f"/tasks/{_seg(int(task_id))}/cancel", model(Task))


def get_task_configuration(task_id: int) -> Call[Configuration]:
    return Call("GET", f"/tasks/{_seg(int(task_id))}/configuration", model(Configuration))


# --- users -------------------------------------------------------------------------------------


def list_users() -> Call[list[User]]:
    return Call("GET", "/users", model(list[User]), pages=True)


def get_user(username: str) -> Call[User]:
    return Call("GET", f"/users/{_seg(username)}", model(User))


def create_user(username: str, role: Role | str, password: str) -> Call[User]:
    body = {"username": username, "role": str(role), "password": password}
    return Call("POST", "/users", model(User), json=body)


def update_user(username: str, role: Role | str | None = None, active: bool | None = None) -> Call[User]:
    body: dict[str, Any] = {}
    if role is not None:
        body["role"] = str(role)
    if active is not None:
        body["active"] = active
    return Call("PATCH", f"/users/{_seg(username)}", model(User), json=body)


def set_password(username: str, password: str) -> Call[User]:
    return Call("PUT", f"/users/{_seg(username)}/password", model(User), json={"password": password})


def reset_password(username: str) -> Call[PasswordReset]:
    return Call("POST", f"/users/{_seg(username)}/password/reset", model(PasswordReset))


# --- agents ------------------------------------------------------------------------------------


def create_agent(name: str, cluster: str) -> Call[AgentKey]:
    return Call("POST", "/agents", model(AgentKey), json={"name": name, "cluster": cluster})


def list_agents(cluster: str | None = None) -> Call[list[Agent]]:
    return Call("GET", "/agents", model(list[Agent]), params=_filters(cluster=cluster), pages=True)


def revoke_agent(name: str) -> Call[Agent]:
    return Call("DELETE", f"/agents/{_seg(name)}", model(Agent))


# --- steps (for actions) -----------------------------------------------------------------------


def add_step_note(step_id: int, note: str) -> Call[None]:
    # Safe to send again: the server records a note once when it is already the step's last.
    return Call(
        "POST", f"/agent/steps/{_seg(step_id)}/notes", no_content, json={"note": note}, idempotent=True
    )


def store_step_output(step_id: int, tail: str, truncated: bool) -> Call[None]:
    # Safe to send again: it replaces the step's kept output.
    body = {"output_tail": tail, "output_truncated": truncated}
    return Call("PUT", f"/agent/steps/{_seg(step_id)}/output", no_content, json=body, idempotent=True)
