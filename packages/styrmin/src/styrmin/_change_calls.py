"""The API calls of previews, revisions, rollback, apply and task logs (for both clients)."""

from __future__ import annotations

from typing import Any

from styrmin._calls import ConfigurationLike, _configuration, _seg
from styrmin._http import Call, model
from styrmin.models import Applied, Preview, Revision, Rollback, TaskLogs


def preview(name: str, body: dict[str, Any]) -> Call[Preview]:
    return Call("POST", f"/deployments/{_seg(name)}/preview", model(Preview), json=body)


def preview_body(kind: str, **fields: Any) -> dict[str, Any]:
    """The body of a preview of a change of ``kind`` (create, upgrade, configure, rollback, apply)."""
    body = {"type": kind, **{key: value for key, value in fields.items() if value is not None}}
    if "configuration" in body:
        body["configuration"] = _configuration(body["configuration"])
    return body


def desired_body(
    driver: str,
    driver_version: str,
    namespace: str | None,
    cluster: str | None,
    app_version: str | None,
    configuration: ConfigurationLike | None,
    stopped_components: list[str] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": driver,
        "driver_version": driver_version,
        "configuration": _configuration(configuration),
    }
    for key, value in (
        ("namespace", namespace),
        ("cluster", cluster),
        ("app_version", app_version),
        ("stopped_components", stopped_components),
    ):
        if value is not None:
            body[key] = value
    return body


def apply(name: str, body: dict[str, Any]) -> Call[Applied]:
    return Call("POST", f"/deployments/{_seg(name)}/apply", model(Applied), json=body)


def list_revisions(name: str) -> Call[list[Revision]]:
    return Call("GET", f"/deployments/{_seg(name)}/revisions", model(list[Revision]), pages=True)


def get_revision(name: str, revision: int) -> Call[Revision]:
    return Call("GET", f"/deployments/{_seg(name)}/revisions/{_seg(int(revision))}", model(Revision))


def rollback(name: str, to_revision: int) -> Call[Rollback]:
    body = {"to_revision": int(to_revision)}
    return Call("POST", f"/deployments/{_seg(name)}/rollback", model(Rollback), json=body)


def task_logs(task_id: int, step: int | None, offset: int, limit: int | None) -> Call[TaskLogs]:
    params = {"offset": str(offset)}
    if step is not None:
        params["step"] = str(step)
    if limit is not None:
        params["limit"] = str(limit)
    return Call("GET", f"/tasks/{_seg(int(task_id))}/logs", model(TaskLogs), params=params)
