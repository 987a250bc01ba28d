"""`kubectl get` Table output: the columns a real API server prints for each kind."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .crds import json_path_value, printer_columns
from .meta import age, parse_time, short_duration
from .resources import ResourceType
from .selectors import selector_to_string

Row = list[Any]
Column = tuple[str, str, int]  # name, type, priority

_NAME = ("Name", "string", 0)
_AGE = ("Age", "string", 0)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _pod_status(pod: dict[str, Any]) -> tuple[str, int, int, int]:
    """(status reason, ready containers, total containers, restarts) as kubectl computes them."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = restarts = 0
    reason = status.get("reason") or status.get("phase") or "Pending"
    initializing = False
    init_total = len(spec.get("initContainers") or [])
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        restarts += container.get("restartCount", 0)
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        initializing = True
        if terminated:
            reason = "Init:" + (terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{init_total}"
        break
    if not initializing:
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += container.get("restartCount", 0)
            state = container.get("state") or {}
            waiting, terminated, running = state.get("waiting"), state.get("terminated"), state.get("running")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = f"ExitCode:{terminated.get('exitCode')}"
            elif running and container.get("ready"):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running"
    if _meta(pod).get("deletionTimestamp"):
        reason = "Terminating"
    return reason, ready, total, restarts


def _pods(pod: dict[str, Any]) -> Row:
    reason, ready, total, restarts = _pod_status(pod)
    status = pod.get("status") or {}
    return [
        _meta(pod)["name"],
        f"{ready}/{total}",
        reason,
        restarts,
        age(_meta(pod).get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


def _containers_images(obj: dict[str, Any]) -> tuple[str, str]:
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _deployments(obj: dict[str, Any]) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers_images(obj)
    return [
        _meta(obj)["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        age(_meta(obj).get("creationTimestamp")),
        names,
        images,
        selector_to_string(spec.get("selector")),
    ]


def _replicasets(obj: dict[str, Any]) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers_images(obj)
    return [
        _meta(obj)["name"],
        spec.get("replicas", 0),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        age(_meta(obj).get("creationTimestamp")),
        names,
        images,
        selector_to_string(spec.get("selector")),
    ]


def _statefulsets(obj: dict[str, Any]) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers_images(obj)
    return [
        _meta(obj)["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        age(_meta(obj).get("creationTimestamp")),
        names,
        images,
    ]


def _daemonsets(obj: dict[str, Any]) -> Row:
    status = obj.get("status") or {}
    selector = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector") or {}
    names, images = _containers_images(obj)
    return [
        _meta(obj)["name"],
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        ",".join(f"{k}={v}" for k, v in selector.items()) or "<none>",
        age(_meta(obj).get("creationTimestamp")),
        names,
        images,
    ]


def _job_status(obj: dict[str, Any]) -> str:
    conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []}
    if conditions.get("Failed") == "True":
        return "Failed"
    if conditions.get("Complete") == "True":
        return "Complete"
    if conditions.get("Suspended") == "True":
        return "Suspended"
    if conditions.get("FailureTarget") == "True":
        return "FailureTarget"
    if conditions.get("SuccessCriteriaMet") == "True":
        return "SuccessCriteriaMet"
    return "Running"


def _jobs(obj: dict[str, Any]) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    completions = spec.get("completions")
    succeeded = status.get("succeeded", 0)
    shown = (
        f"{succeeded}/{completions}"
        if completions is not None
        else f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    )
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = short_duration((end or time.time()) - start) if start else ""
    names, images = _containers_images(obj)
    return [
        _meta(obj)["name"],
        _job_status(obj),
        shown,
        duration,
        age(_meta(obj).get("creationTimestamp")),
        names,
        images,
        selector_to_string(spec.get("selector")),
    ]


def _services(obj: dict[str, Any]) -> Row:
    spec = obj.get("spec") or {}
    ports = []
    for port in spec.get("ports") or []:
        text = str(port.get("port"))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        ports.append(f"{text}/{port.get('protocol', 'TCP')}")
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    external = ",".join(i.get("ip") or i.get("hostname", "") for i in ingress) or (
        "<pending>" if spec.get("type") == "LoadBalancer" else spec.get("externalName") or "<none>"
    )
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [
        _meta(obj)["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        external,
        ",".join(ports) or "<none>",
        age(_meta(obj).get("creationTimestamp")),
        selector,
    ]


def _configmaps(obj: dict[str, Any]) -> Row:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_meta(obj)["name"], count, age(_meta(obj).get("creationTimestamp"))]


def _secrets(obj: dict[str, Any]) -> Row:
    return [
        _meta(obj)["name"],
        obj.get("type", "Opaque"),
        len(obj.get("data") or {}),
        age(_meta(obj).get("creationTimestamp")),
    ]


def _serviceaccounts(obj: dict[str, Any]) -> Row:
    return [_meta(obj)["name"], len(obj.get("secrets") or []), age(_meta(obj).get("creationTimestamp"))]


def _namespaces(obj: dict[str, Any]) -> Row:
    return [
        _meta(obj)["name"],
        (obj.get("status") or {}).get("phase", "Active"),
        age(_meta(obj).get("creationTimestamp")),
    ]


def _events(obj: dict[str, Any]) -> Row:
    involved = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp")
    return [
        age(last),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}",
        obj.get("message", ""),
    ]


def _nodes(obj: dict[str, Any]) -> Row:
    ready = next(
        (
            c.get("status")
            for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ),
        "Unknown",
    )
    version = ((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [
        _meta(obj)["name"],
        "Ready" if ready == "True" else "NotReady",
        "control-plane",
        age(_meta(obj).get("creationTimestamp")),
        version,
    ]


def _crds(obj: dict[str, Any]) -> Row:
    return [_meta(obj)["name"], _meta(obj).get("creationTimestamp", "")]


def _pvcs(obj: dict[str, Any]) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        _meta(obj)["name"],
        status.get("phase", "Pending"),
        spec.get("volumeName", ""),
        (status.get("capacity") or {}).get("storage", ""),
        ",".join(status.get("accessModes") or []),
        spec.get("storageClassName") or "<unset>",
        age(_meta(obj).get("creationTimestamp")),
    ]


def _default(obj: dict[str, Any]) -> Row:
    return [_meta(obj)["name"], age(_meta(obj).get("creationTimestamp"))]


_TABLES: dict[tuple[str, str], tuple[list[Column], Callable[[dict[str, Any]], Row]]] = {
    ("", "pods"): (
        [
            _NAME,
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            _AGE,
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        _pods,
    ),
    ("apps", "deployments"): (
        [
            _NAME,
            ("Ready", "string", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        _deployments,
    ),
    ("apps", "replicasets"): (
        [
            _NAME,
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        _replicasets,
    ),
    ("apps", "statefulsets"): (
        [_NAME, ("Ready", "string", 0), _AGE, ("Containers", "string", 1), ("Images", "string", 1)],
        _statefulsets,
    ),
    ("apps", "daemonsets"): (
        [
            _NAME,
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Node Selector", "string", 0),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
        ],
        _daemonsets,
    ),
    ("batch", "jobs"): (
        [
            _NAME,
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        _jobs,
    ),
    ("", "services"): (
        [
            _NAME,
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            _AGE,
            ("Selector", "string", 1),
        ],
        _services,
    ),
    ("", "configmaps"): ([_NAME, ("Data", "integer", 0), _AGE], _configmaps),
    ("", "secrets"): ([_NAME, ("Type", "string", 0), ("Data", "integer", 0), _AGE], _secrets),
    ("", "serviceaccounts"): ([_NAME, ("Secrets", "integer", 0), _AGE], _serviceaccounts),
    ("", "namespaces"): ([_NAME, ("Status", "string", 0), _AGE], _namespaces),
    ("", "events"): (
        [
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ],
        _events,
    ),
    ("", "nodes"): (
        [_NAME, ("Status", "string", 0), ("Roles", "string", 0), _AGE, ("Version", "string", 0)],
        _nodes,
    ),
    ("", "persistentvolumeclaims"): (
        [
            _NAME,
            ("Status", "string", 0),
            ("Volume", "string", 0),
            ("Capacity", "string", 0),
            ("Access Modes", "string", 0),
            ("StorageClass", "string", 0),
            _AGE,
        ],
        _pvcs,
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): ([_NAME, ("Created At", "date", 0)], _crds),
}


def _custom_columns(rtype: ResourceType) -> tuple[list[Column], Callable[[dict[str, Any]], Row]] | None:
    columns = printer_columns(rtype)
    if not columns:
        return None

    def row(obj: dict[str, Any]) -> Row:
        cells: Row = [_meta(obj)["name"]]
        for column in columns:
            value = json_path_value(obj, column.get("jsonPath", ""))
            if column.get("type") == "date" and isinstance(value, str):
                value = age(value)
            cells.append(value if value is not None else "<none>" if column.get("type") == "string" else None)
        return cells

    defined: list[Column] = [_NAME] + [
        (
            c.get("name", ""),
            "string" if c.get("type") == "date" else c.get("type", "string"),
            c.get("priority", 0),
        )
        for c in columns
    ]
    return defined, row


def _partial(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def to_table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    include_object: str = "Metadata",
    list_meta: dict[str, Any] | None = None,
    with_columns: bool = True,
) -> dict[str, Any]:
    columns, row = _custom_columns(rtype) or _TABLES.get(rtype.storage_key, ([_NAME, _AGE], _default))
    rows = []
    for obj in objects:
        entry: dict[str, Any] = {"cells": row(obj)}
        if include_object == "Object":
            entry["object"] = obj
        elif include_object != "None":
            entry["object"] = _partial(rtype, obj)
        rows.append(entry)
    table: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "rows": rows,
    }
    if with_columns:
        table["columnDefinitions"] = [
            {
                "name": name,
                "type": ctype,
                "format": "name" if name == "Name" else "",
                "description": "",
                "priority": priority,
            }
            for name, ctype, priority in columns
        ]
    return table
