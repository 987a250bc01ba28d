"""Events the controllers and the kubelet record about objects, as `kubectl describe` shows them."""

from __future__ import annotations

import secrets
from typing import Any

from .apiserver import ApiServer
from .meta import new_uid, now

EVENTS = ("", "events")
# The oldest events are removed beyond this many, as a real cluster's event TTL would.
MAX_EVENTS = 5000


def record_event(
    api: ApiServer, obj: dict[str, Any], event_type: str, reason: str, message: str, component: str
) -> None:
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    if api.store.get(("", "namespaces"), "", namespace) is None:
        return
    timestamp = now()
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{secrets.token_hex(8)}",
            "namespace": namespace,
            "uid": new_uid(),
            "creationTimestamp": timestamp,
            "generation": 1,
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component, "host": "localcluster"},
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
        "type": event_type,
        "reportingComponent": component,
        "reportingInstance": "localcluster",
        "action": reason,
    }
    event["metadata"]["resourceVersion"] = str(api.store.next_resource_version())
    api.store.put(EVENTS, event)
    if api.store.count(EVENTS) > MAX_EVENTS:
        oldest = min(api.store.list(EVENTS), key=lambda e: int(e["metadata"]["resourceVersion"]))
        api.store.remove(EVENTS, oldest["metadata"]["namespace"], oldest["metadata"]["name"])
