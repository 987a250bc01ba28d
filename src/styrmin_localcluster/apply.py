"""Server-side apply: merge an applied configuration and drop the fields its manager stopped applying.

Each Apply manager's fields are recorded in metadata.managedFields (FieldsV1), so the next apply by the
same manager knows which fields it owned. Conflicts between managers are not detected: every apply
behaves as if `force=true` was given.
"""

from __future__ import annotations

import json
from typing import Any

from .meta import now
from .patching import PRIMITIVE, _fields_of, strategic_merge_patch
from .store import clone

FieldSet = dict[str, Any]
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


def apply(live: dict[str, Any] | None, applied: dict[str, Any], manager: str, kind: str) -> dict[str, Any]:
    """The object after `manager` applies `applied` to `live` (None when the object does not exist)."""
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
        result = clone(applied)
        result.setdefault("metadata", {})["managedFields"] = [entry]
        return result
    managed = list((live.get("metadata") or {}).get("managedFields") or [])
    previous = next(
        (m for m in managed if m.get("manager") == manager and m.get("operation") == "Apply"), None
    )
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
    return result


def _strip_directives(value: Any) -> Any:
    """An applied configuration is plain data: keys starting with '$' carry no patch directive."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
