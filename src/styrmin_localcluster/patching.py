"""Patches: JSON merge patch, JSON patch and strategic merge patch with the built-in kinds' merge keys."""

from __future__ import annotations

from typing import Any

from .errors import ApiError, bad_request
from .store import clone

# Where strategic merge patch merges lists instead of replacing them. For each type: field name to
# either a nested type name (for maps), or (merge key, item type) for lists merged by key, or
# (PRIMITIVE, None) for lists of scalars merged as sets.
PRIMITIVE = "$primitive"
_SCHEMA: dict[str, dict[str, Any]] = {
    "ObjectMeta": {"finalizers": (PRIMITIVE, None), "ownerReferences": ("uid", None)},
    "PodTemplateSpec": {"metadata": "ObjectMeta", "spec": "PodSpec"},
    "PodSpec": {
        "containers": ("name", "Container"),
        "initContainers": ("name", "Container"),
        "ephemeralContainers": ("name", "Container"),
        "volumes": ("name", None),
        "imagePullSecrets": ("name", None),
        "hostAliases": ("ip", None),
        "topologySpreadConstraints": ("topologyKey", None),
        "resourceClaims": ("name", None),
    },
    "Container": {
        "env": ("name", None),
        "ports": ("containerPort", None),
        "volumeMounts": ("mountPath", None),
        "volumeDevices": ("devicePath", None),
        "resizePolicy": ("resourceName", None),
    },
    "PodStatus": {
        "conditions": ("type", None),
        "podIPs": ("ip", None),
        "hostIPs": ("ip", None),
    },
    "WorkloadSpec": {"template": "PodTemplateSpec"},
    "WithConditions": {"conditions": ("type", None)},
    "ServiceSpec": {"ports": ("port", None)},
    "ServiceAccount": {"secrets": ("name", None), "imagePullSecrets": ("name", None)},
    "NodeStatus": {"addresses": ("type", None), "conditions": ("type", None)},
}
_TOP: dict[str, dict[str, Any]] = {
    "Pod": {"spec": "PodSpec", "status": "PodStatus"},
    "Deployment": {"spec": "WorkloadSpec", "status": "WithConditions"},
    "ReplicaSet": {"spec": "WorkloadSpec", "status": "WithConditions"},
    "StatefulSet": {"spec": "WorkloadSpec", "status": "WithConditions"},
    "DaemonSet": {"spec": "WorkloadSpec", "status": "WithConditions"},
    "Job": {"spec": "WorkloadSpec", "status": "WithConditions"},
    "Service": {"spec": "ServiceSpec", "status": "WithConditions"},
    "Node": {"status": "NodeStatus"},
    "CustomResourceDefinition": {"status": "WithConditions"},
    "Namespace": {"status": "WithConditions"},
    "PersistentVolumeClaim": {"status": "WithConditions"},
}


def _fields_of(type_name: str | None, kind: str | None = None) -> dict[str, Any]:
    if kind is not None:
        fields = {"metadata": "ObjectMeta", **_TOP.get(kind, {})}
        if kind == "ServiceAccount":
            fields.update(_SCHEMA["ServiceAccount"])
        return fields
    return _SCHEMA.get(type_name or "", {})


# --- JSON merge patch (RFC 7386) ------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- JSON patch (RFC 6902) ------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f'invalid JSON pointer "{path}": it must start with "/"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _json_patch_error(f'doc is missing path: "{path}"')
    return node


def _json_patch_error(message: str) -> ApiError:
    return ApiError(
        422, "Invalid", f"the server rejected our request due to an error in our request: {message}"
    )


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _json_patch_error(f'doc is missing path: "{path}"')


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _json_patch_error(f'unable to add index {last} to array at "{path}"')
    else:
        raise _json_patch_error(f'doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise _json_patch_error(f'unable to remove nonexistent key: {last}; path: "{path}"')
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = clone(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        name, path = op["op"], op.get("path", "")
        if name == "add":
            doc = _add(doc, path, clone(op.get("value")))
        elif name == "remove":
            doc = _remove(doc, path)
        elif name == "replace":
            _get(doc, path)
            doc = _remove(doc, path) if _pointer(path) else doc
            doc = _add(doc, path, clone(op.get("value")))
        elif name == "move":
            value = _get(doc, op["from"])
            doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif name == "copy":
            doc = _add(doc, path, clone(_get(doc, op["from"])))
        elif name == "test":
            if _get(doc, path) != op.get("value"):
                raise _json_patch_error(f"testing value {path} failed")
        else:
            raise bad_request(f'unexpected JSON patch operation "{name}"')
    return doc


# --- strategic merge patch ------------------------------------------------------------------------


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    """Apply a strategic merge patch to an object of a built-in kind."""
    if not isinstance(patch, dict):
        raise bad_request("a strategic merge patch must be a JSON object")
    result: dict[str, Any] = _merge_map(target, patch, _fields_of(None, kind))
    return result


def _merge_map(target: Any, patch: dict[str, Any], fields: dict[str, Any]) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    orders = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$setElementOrder/")}
    deletions = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$deleteFromPrimitiveList/")}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        spec = fields.get(key)
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current, value, _fields_of(spec if isinstance(spec, str) else None))
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(spec, tuple):
            merge_key, item_type = spec
            result[key] = _merge_list(
                current if isinstance(current, list) else [], value, merge_key, item_type
            )
        else:
            result[key] = clone(value)
    for key, values in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [v for v in result[key] if v not in values]
    for key, order in orders.items():
        spec = fields.get(key)
        if isinstance(result.get(key), list) and isinstance(spec, tuple):
            result[key] = _reorder(result[key], order, spec[0])
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _item_key(item: Any, merge_key: str) -> Any:
    return item.get(merge_key) if isinstance(item, dict) else item


def _merge_list(current: list[Any], patch: list[Any], merge_key: str, item_type: str | None) -> list[Any]:
    if merge_key == PRIMITIVE:
        result = list(current)
        for value in patch:
            if value not in result:
                result.append(value)
        return result
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [clone(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    result = list(current)
    for item in patch:
        if not isinstance(item, dict):
            continue
        key = item.get(merge_key)
        position = next(
            (i for i, existing in enumerate(result) if _item_key(existing, merge_key) == key), None
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
            continue
        if position is None:
            result.append({k: clone(v) for k, v in item.items() if not k.startswith("$")})
        else:
            result[position] = _merge_map(result[position], item, _fields_of(item_type))
    return result


def _reorder(items: list[Any], order: list[Any], merge_key: str) -> list[Any]:
    keys = [_item_key(o, merge_key) for o in order]
    ordered = sorted(
        (i for i in items if _item_key(i, merge_key) in keys),
        key=lambda i: keys.index(_item_key(i, merge_key)),
    )
    return ordered + [i for i in items if _item_key(i, merge_key) not in keys]
