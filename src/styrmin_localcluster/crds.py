"""CustomResourceDefinitions: serving their resources, and the schema's pruning, defaults and validation."""

from __future__ import annotations

import re
from typing import Any

from .meta import now
from .resources import Registry, ResourceType
from .store import Store, clone

Causes = list[tuple[str, str]]


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    types = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        types.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope") == "Namespaced",
                singular=names.get("singular", names["kind"].lower()),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=tuple(k for k in ("status", "scale") if k in subresources),
                crd_version=version,
                builtin=False,
            )
        )
    return types


def sync_crd(registry: Registry, crd: dict[str, Any], removed: bool, store: Store | None = None) -> None:
    """Serve the CRD's versions; when it was deleted, stop serving them and delete its objects."""
    spec = crd.get("spec") or {}
    group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
    registry.remove_group_resource(group, plural)
    if removed and store is not None:
        for obj in store.list((group, plural)):
            store.remove((group, plural), obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        store.drop_kind((group, plural))
    if not removed:
        for rtype in crd_types(crd):
            registry.add(rtype)


def initial_crd_status(crd: dict[str, Any]) -> None:
    """A CRD is served at once: its names are accepted and it is Established."""
    spec = crd.get("spec") or {}
    timestamp = now()
    status = dict(crd.get("status") or {})
    conditions = {c["type"]: c for c in status.get("conditions") or [] if isinstance(c, dict)}
    for ctype, reason, message in (
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ):
        if conditions.get(ctype, {}).get("status") != "True":
            conditions[ctype] = {
                "type": ctype,
                "status": "True",
                "lastTransitionTime": timestamp,
                "reason": reason,
                "message": message,
            }
    status["conditions"] = list(conditions.values())
    status["acceptedNames"] = clone(spec.get("names") or {})
    stored = list(status.get("storedVersions") or [])
    for version in spec.get("versions") or []:
        if version.get("storage") and version.get("name") not in stored:
            stored.append(version["name"])
    status["storedVersions"] = stored
    crd["status"] = status


def scale_paths(rtype: ResourceType) -> tuple[str, str, str | None]:
    """(spec replicas path, status replicas path, label selector path) of a kind's scale subresource."""
    if rtype.crd_version is None:
        return ".spec.replicas", ".status.replicas", None
    scale = (rtype.crd_version.get("subresources") or {}).get("scale") or {}
    return (
        scale.get("specReplicasPath", ".spec.replicas"),
        scale.get("statusReplicasPath", ".status.replicas"),
        scale.get("labelSelectorPath"),
    )


def _schema(rtype: ResourceType) -> dict[str, Any] | None:
    version = rtype.crd_version or {}
    return (version.get("schema") or {}).get("openAPIV3Schema")


# --- pruning and defaults -------------------------------------------------------------------------


def _prune_and_default(
    value: Any, schema: dict[str, Any] | None, path: str, pruned: list[str], top: bool = False
) -> Any:
    if schema is None:
        return value
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
            "x-kubernetes-embedded-resource"
        )
        result = {}
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if top and key in ("apiVersion", "kind", "metadata"):
                result[key] = item
            elif key in properties:
                result[key] = _prune_and_default(item, properties[key], child, pruned)
            elif isinstance(additional, dict):
                result[key] = _prune_and_default(item, additional, child, pruned)
            elif additional is True or keep_unknown:
                result[key] = item
            else:
                pruned.append(child)
        for key, sub in properties.items():
            if key not in result and isinstance(sub, dict) and "default" in sub:
                result[key] = _prune_and_default(clone(sub["default"]), sub, f"{path}.{key}", [])
        return result
    if isinstance(value, list):
        items = schema.get("items")
        return [
            _prune_and_default(item, items if isinstance(items, dict) else None, f"{path}[{index}]", pruned)
            for index, item in enumerate(value)
        ]
    return value


def default_custom_resource(rtype: ResourceType, obj: dict[str, Any], strict: bool = False) -> dict[str, Any]:
    """Prune the fields the schema does not declare and fill its defaults.

    With `strict` (the client sent fieldValidation=Strict, as kubectl and Helm do), an undeclared field
    is refused with 400 instead, as Kubernetes does.
    """
    schema = _schema(rtype)
    if not schema:
        return obj
    pruned: list[str] = []
    result: dict[str, Any] = _prune_and_default(obj, schema, "", pruned, top=True)
    if strict and pruned:
        from .errors import bad_request

        unknown = ", ".join(f'unknown field "{field}"' for field in pruned)
        raise bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
            f"strict decoding error: {unknown}"
        )
    return result


# --- validation -----------------------------------------------------------------------------------

_TYPE_NAMES = {
    "integer": "integer",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "object": "object",
    "array": "array",
}


def _type_ok(value: Any, wanted: str) -> bool:
    if wanted == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if wanted == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if wanted == "string":
        return isinstance(value, str)
    if wanted == "boolean":
        return isinstance(value, bool)
    if wanted == "object":
        return isinstance(value, dict)
    if wanted == "array":
        return isinstance(value, list)
    return True


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _validate_value(value: Any, schema: dict[str, Any], path: str, causes: Causes) -> None:
    if value is None:
        if not schema.get("nullable"):
            causes.append(
                (
                    path,
                    f'Invalid value: "null": {path} in body must be of type {schema.get("type", "object")}: "null"',
                )
            )
        return
    wanted = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, (int, str)) and not isinstance(value, bool)):
            causes.append(
                (path, f"Invalid value: {_describe(value)}: {path} in body must be of type integer or string")
            )
        return
    if wanted and not _type_ok(value, wanted):
        causes.append(
            (
                path,
                f'Invalid value: "{type(value).__name__}": {path} in body must be of type {wanted}: {_describe(value)}',
            )
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_describe(v) for v in schema["enum"])
        causes.append((path, f"Unsupported value: {_describe(value)}: supported values: {allowed}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                (
                    path,
                    f"Invalid value: {value}: {path} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                (
                    path,
                    f"Invalid value: {value}: {path} in body should be less than or equal to {schema['maximum']}",
                )
            )
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                (
                    path,
                    f'Invalid value: "{value}": {path} in body should be at least {schema["minLength"]} chars long',
                )
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append((path, f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append(
                (path, f"Invalid value: \"{value}\": {path} in body should match '{schema['pattern']}'")
            )
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                (
                    path,
                    f"Invalid value: {len(value)}: {path} in body should have at least {schema['minItems']} items",
                )
            )
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append((path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _validate_value(item, items, f"{path}[{index}]", causes)
    if isinstance(value, dict):
        for required in schema.get("required") or []:
            if required not in value:
                causes.append((f"{path}.{required}" if path else required, "Required value"))
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if key in properties:
                _validate_value(item, properties[key], child, causes)
            elif isinstance(additional, dict):
                _validate_value(item, additional, child, causes)


def validate_custom_resource(rtype: ResourceType, obj: dict[str, Any]) -> Causes:
    schema = _schema(rtype)
    if not schema:
        return []
    causes: Causes = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    trimmed = dict(schema)
    trimmed["properties"] = {
        k: v
        for k, v in (schema.get("properties") or {}).items()
        if k not in ("apiVersion", "kind", "metadata")
    }
    trimmed["required"] = [
        r for r in schema.get("required") or [] if r not in ("apiVersion", "kind", "metadata")
    ]
    _validate_value(body, trimmed, "", causes)
    return causes


# --- printer columns ------------------------------------------------------------------------------


def printer_columns(rtype: ResourceType) -> list[dict[str, Any]]:
    return list((rtype.crd_version or {}).get("additionalPrinterColumns") or [])


def json_path_value(obj: Any, path: str) -> Any:
    """Evaluate the JSONPath subset printer columns use: `.a.b`, `[0]`, `[?(@.type=="Ready")]`."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    path = path.lstrip("$")
    tokens = re.findall(
        r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]|\['([^']+)'\]",
        path,
    )
    value = obj
    for name, index, filter_key, filter_value, quoted in tokens:
        if value is None:
            return None
        if name or quoted:
            value = value.get(name or quoted) if isinstance(value, dict) else None
        elif index:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
        elif filter_key:
            if not isinstance(value, list):
                return None
            value = next(
                (
                    item
                    for item in value
                    if isinstance(item, dict) and str(json_path_value(item, "." + filter_key)) == filter_value
                ),
                None,
            )
    return value
