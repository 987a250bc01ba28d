"""Shared pieces of the workload controllers: pods of an owner, readiness, templates, surge arithmetic."""

from __future__ import annotations

import math
import time
from typing import Any

import orjson

from .apiserver import PODS, ApiServer
from .errors import ApiError
from .meta import owner_reference, parse_time, safe_hash
from .store import clone


def owned(api: ApiServer, owner: dict[str, Any], key: tuple[str, str]) -> list[dict[str, Any]]:
    """Objects of `key` whose controller is `owner`, oldest first."""
    uid = owner["metadata"]["uid"]
    found = []
    for dep_key, obj in api.dependents_of(uid):
        if dep_key != key:
            continue
        if any(
            r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or []
        ):
            found.append(obj)
    found.sort(
        key=lambda o: (o["metadata"].get("creationTimestamp", ""), int(o["metadata"]["resourceVersion"]))
    )
    return found


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_active(pod: dict[str, Any]) -> bool:
    return not is_terminal(pod) and not pod["metadata"].get("deletionTimestamp")


def is_ready(pod: dict[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def ready_since(pod: dict[str, Any]) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def is_available(pod: dict[str, Any], min_ready_seconds: int) -> bool:
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is not None and time.time() - since >= min_ready_seconds


def template_hash(template: dict[str, Any]) -> str:
    """A stable hash of a pod template, as the pod-template-hash and revision labels carry."""
    return safe_hash(orjson.dumps(template, option=orjson.OPT_SORT_KEYS).decode())


def new_pod(
    owner: dict[str, Any],
    template: dict[str, Any],
    extra_labels: dict[str, str],
    name: str | None = None,
    generate_name: str | None = None,
) -> dict[str, Any]:
    template = clone(template)
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(extra_labels)
    pod_meta: dict[str, Any] = {
        "namespace": owner["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [owner_reference(owner)],
    }
    if meta.get("annotations"):
        pod_meta["annotations"] = meta["annotations"]
    if name:
        pod_meta["name"] = name
    else:
        pod_meta["generateName"] = generate_name
    if meta.get("finalizers"):
        pod_meta["finalizers"] = meta["finalizers"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}


def resolve_int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        fraction = int(value[:-1]) * total / 100
        return math.ceil(fraction) if round_up else math.floor(fraction)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def pod_type(api: ApiServer) -> Any:
    return api.type_for(PODS)


def delete_pod(api: ApiServer, pod: dict[str, Any]) -> None:
    """Delete a pod a controller no longer wants; one already gone is fine."""
    try:
        api.delete(pod_type(api), pod["metadata"]["namespace"], pod["metadata"]["name"])
    except ApiError as exc:
        if exc.code != 404:
            raise
