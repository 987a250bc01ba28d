"""Field ownership and server-side apply, as Kubernetes tracks them in metadata.managedFields.

Every write with a field manager records the fields it set: an Update (create, update, patch, scale)
owns the fields it changed and takes them from other managers; an Apply owns exactly the fields of its
applied configuration. Applying a value different from the live one to a field that another manager
owns is a conflict (409) unless `force=true`, which takes the field over. An Apply that no longer sets
a field it set before removes it, unless another manager owns it too. Status is not tracked.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ApiError
from .meta import now
from .patching import PRIMITIVE, _fields_of, strategic_merge_patch
from .store import clone

FieldSet = dict[str, Any]
Path = tuple[str, ...]
_MISSING = object()
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_IDENTITY = {"apiVersion", "kind"}
_META_IDENTITY = {
    "name",
    "namespace",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "managedFields",
    "generation",
}


def field_set(obj: dict[str, Any], kind: str) -> FieldSet:
    """The FieldsV1 set of the fields an applied configuration sets."""
    fields = _fields_of(None, kind)
    result: FieldSet = {}
    for key, value in obj.items():
        if key in _IDENTITY:
            continue
        if key == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _META_IDENTITY}
            if not value:
                continue
        result[f"f:{key}"] = _value_set(value, fields.get(key))
    return result


def _value_set(value: Any, spec: Any) -> FieldSet:
    if isinstance(value, dict):
        nested = _fields_of(spec if isinstance(spec, str) else None)
        return {f"f:{k}": _value_set(v, nested.get(k)) for k, v in value.items()}
    if isinstance(value, list) and isinstance(spec, tuple):
        merge_key, item_type = spec
        if merge_key == PRIMITIVE:
            return {f"v:{json.dumps(v)}": {} for v in value}
        items: FieldSet = {}
        for item in value:
            if isinstance(item, dict) and merge_key in item:
                key = "k:" + json.dumps({merge_key: item[merge_key]}, separators=(",", ":"))
                entry: FieldSet = {".": {}}
                nested = _fields_of(item_type)
                entry.update({f"f:{k}": _value_set(v, nested.get(k)) for k, v in item.items()})
                items[key] = entry
        return items
    return {}


def _locate_item(items: list[Any], key: str) -> int | None:
    if key.startswith("k:"):
        wanted = json.loads(key[2:])
        for index, item in enumerate(items):
            if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
                return index
    elif key.startswith("v:"):
        wanted_value = json.loads(key[2:])
        for index, item in enumerate(items):
            if item == wanted_value:
                return index
    return None


def _remove_fields(node: Any, old: FieldSet, new: FieldSet | None, others: FieldSet | None) -> None:
    """Remove from `node` what `old` owns and `new` no longer does, sparing what others own."""
    for entry, old_children in old.items():
        if entry == ".":
            continue
        new_children = new.get(entry) if new is not None else None
        other_children = others.get(entry) if others is not None else None
        if isinstance(node, dict) and entry.startswith("f:"):
            name = entry[2:]
            if name not in node:
                continue
            if new_children is None and other_children is None:
                del node[name]
            elif old_children:
                _remove_fields(node[name], old_children, new_children, other_children)
        elif isinstance(node, list):
            index = _locate_item(node, entry)
            if index is None:
                continue
            if new_children is None and other_children is None:
                del node[index]
            elif old_children:
                _remove_fields(node[index], old_children, new_children, other_children)


def _union(sets: list[FieldSet]) -> FieldSet:
    result: FieldSet = {}
    for fields in sets:
        for key, children in fields.items():
            result[key] = _union([result.get(key, {}), children]) if children or key in result else {}
    return result


def _leaf_values(obj: dict[str, Any], kind: str) -> dict[Path, Any]:
    """Every leaf field of an object (status and identity left out) with its value, by FieldsV1 path."""
    fields = _fields_of(None, kind)
    leaves: dict[Path, Any] = {}
    for key, value in obj.items():
        if key in _IDENTITY or key == "status":
            continue
        if key == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _META_IDENTITY}
        _walk(value, fields.get(key), (f"f:{key}",), leaves)
    return leaves


def _walk(value: Any, spec: Any, path: Path, leaves: dict[Path, Any]) -> None:
    if isinstance(value, dict) and value:
        nested = _fields_of(spec if isinstance(spec, str) else None)
        for key, item in value.items():
            _walk(item, nested.get(key), (*path, f"f:{key}"), leaves)
    elif isinstance(value, list) and value and isinstance(spec, tuple):
        merge_key, item_type = spec
        for item in value:
            if merge_key == PRIMITIVE:
                leaves[(*path, f"v:{json.dumps(item)}")] = True
            elif isinstance(item, dict) and merge_key in item:
                key = "k:" + json.dumps({merge_key: item[merge_key]}, separators=(",", ":"))
                nested = _fields_of(item_type)
                for name, field_value in item.items():
                    _walk(field_value, nested.get(name), (*path, key, f"f:{name}"), leaves)
    else:
        leaves[path] = value


def _tree_paths(tree: FieldSet, prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for key, child in tree.items():
        if key == ".":
            continue
        path = (*prefix, key)
        inner = {k: v for k, v in (child or {}).items() if k != "."}
        paths |= _tree_paths(inner, path) if inner else {path}
    return paths


def _paths_tree(paths: set[Path]) -> FieldSet:
    tree: FieldSet = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(part, {})
            if part.startswith("k:"):
                node.setdefault(".", {})
    return tree


def render_path(path: Path) -> str:
    """A field path as Kubernetes prints it in conflicts: .spec.containers[name="web"].image."""
    text = ""
    for part in path:
        if part.startswith("f:"):
            text += "." + part[2:]
        elif part.startswith("k:"):
            keys = json.loads(part[2:])
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        elif part.startswith("v:"):
            text += f"[={part[2:]}]"
    return text


def _entry(
    manager: str, operation: str, api_version: str, paths: set[Path], subresource: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": _paths_tree(paths),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _same_manager(entry: dict[str, Any], manager: str, operation: str, subresource: str | None) -> bool:
    return (
        entry.get("manager") == manager
        and entry.get("operation") == operation
        and (entry.get("subresource") or None) == (subresource or None)
    )


def record_update(
    before: dict[str, Any] | None,
    after: dict[str, Any],
    manager: str,
    kind: str,
    subresource: str | None = None,
) -> list[dict[str, Any]]:
    """The managedFields after `manager` changed `before` into `after` with an Update."""
    managed = list((after.get("metadata") or {}).get("managedFields") or [])
    old_leaves = _leaf_values(before, kind) if before is not None else {}
    new_leaves = _leaf_values(after, kind)
    changed = {
        p
        for p in old_leaves.keys() | new_leaves.keys()
        if old_leaves.get(p, _MISSING) != new_leaves.get(p, _MISSING)
    }
    if not changed:
        return managed
    result = []
    mine: set[Path] = set()
    for entry in managed:
        owned = _tree_paths(entry.get("fieldsV1") or {})
        if _same_manager(entry, manager, "Update", subresource):
            mine = owned
            continue
        if owned & changed:
            owned -= changed
            if owned:
                result.append(dict(entry, fieldsV1=_paths_tree(owned)))
        else:
            result.append(entry)
    mine = (mine | changed) & new_leaves.keys()
    if mine:
        result.append(_entry(manager, "Update", str(after.get("apiVersion", "")), mine, subresource))
    return result


def _describe(entry: dict[str, Any]) -> str:
    text = f'"{entry.get("manager")}"'
    if entry.get("subresource"):
        text += f' with subresource "{entry["subresource"]}"'
    return f"{text} using {entry.get('apiVersion', '')}"


def _conflict_error(conflicts: list[tuple[dict[str, Any], Path]]) -> ApiError:
    count = len(conflicts)
    if count == 1:
        entry, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {_describe(entry)}: {render_path(path)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for entry, path in conflicts:
            by_manager.setdefault(_describe(entry), []).append(render_path(path))
        message = f"Apply failed with {count} conflicts: " + "\n".join(
            f"conflicts with {who}:\n" + "\n".join(f"- {p}" for p in sorted(paths))
            for who, paths in by_manager.items()
        )
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {_describe(e)}",
            "field": render_path(p),
        }
        for e, p in conflicts
    ]
    return ApiError(409, "Conflict", message, {"causes": causes})


def apply(
    live: dict[str, Any] | None, applied: dict[str, Any], manager: str, kind: str, force: bool = False
) -> dict[str, Any]:
    """The object after `manager` applies `applied` to `live` (None when the object does not exist).

    Raises:
        ApiError: 409 Conflict when another manager owns a field this apply changes, without `force`.
    """
    new_set = field_set(applied, kind)
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": applied.get("apiVersion", ""),
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": new_set,
    }
    if live is None:
        created: dict[str, Any] = clone(applied)
        created.setdefault("metadata", {})["managedFields"] = [entry]
        return created
    managed = list((live.get("metadata") or {}).get("managedFields") or [])
    applied_leaves = _leaf_values(applied, kind)
    live_leaves = _leaf_values(live, kind)
    conflicts: list[tuple[dict[str, Any], Path]] = []
    for other in managed:
        if _same_manager(other, manager, "Apply", None):
            continue
        for path in sorted(_tree_paths(other.get("fieldsV1") or {}) & applied_leaves.keys()):
            if path in live_leaves and live_leaves[path] != applied_leaves[path]:
                conflicts.append((other, path))
    if conflicts and not force and manager == "kubectl":
        # Like the API server, let `kubectl apply --server-side` take over the fields that an earlier
        # client-side `kubectl apply` set (those in its last-applied-configuration annotation).
        allowed = _last_applied_paths(live, kind)
        if all(path in allowed for _, path in conflicts):
            force = True
    if conflicts and not force:
        raise _conflict_error(conflicts)
    if conflicts:
        taken = {path for _, path in conflicts}
        kept = []
        for other in managed:
            owned = _tree_paths(other.get("fieldsV1") or {})
            if owned & taken and not _same_manager(other, manager, "Apply", None):
                owned -= taken
                if owned:
                    kept.append(dict(other, fieldsV1=_paths_tree(owned)))
            else:
                kept.append(other)
        managed = kept
    previous = next((m for m in managed if _same_manager(m, manager, "Apply", None)), None)
    others = [m.get("fieldsV1") or {} for m in managed if m is not previous]
    result = clone(live)
    if previous is not None:
        _remove_fields(result, previous.get("fieldsV1") or {}, new_set, _union(others) if others else None)
    patch = {k: v for k, v in applied.items() if k not in _IDENTITY}
    if isinstance(patch.get("metadata"), dict):
        patch["metadata"] = {k: v for k, v in patch["metadata"].items() if k not in _META_IDENTITY}
    result = strategic_merge_patch(result, _strip_directives(patch), kind)
    managed = [m for m in managed if m is not previous] + [entry]
    result.setdefault("metadata", {})["managedFields"] = managed
    annotations = result["metadata"].get("annotations") or {}
    if manager == "kubectl" and LAST_APPLIED in annotations:
        # Kept up to date so that a later client-side `kubectl apply` computes the right patch.
        result["metadata"]["annotations"] = dict(
            annotations, **{LAST_APPLIED: json.dumps(applied, separators=(",", ":"))}
        )
    return result


def _last_applied_paths(live: dict[str, Any], kind: str) -> set[Path]:
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return set()
    try:
        last_applied = json.loads(text)
    except ValueError:
        return set()
    return set(_leaf_values(last_applied, kind)) if isinstance(last_applied, dict) else set()


def _strip_directives(value: Any) -> Any:
    """An applied configuration is plain data: keys starting with '$' carry no patch directive."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
