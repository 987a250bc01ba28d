"""Validation on write: the checks of a real API server that catch the mistakes charts and clients make."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from .selectors import selector_matches

Causes = list[tuple[str, str]]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

# Kinds whose names must be DNS labels (no dots), as in Kubernetes.
_LABEL_NAMED = {("", "namespaces"), ("", "services")}
MAX_OBJECT_DATA = 1024 * 1024


def _dns_label_message(value: str) -> str:
    return (
        f'Invalid value: "{value}": a lowercase RFC 1123 label must consist of lower case alphanumeric '
        "characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
        "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    )


def _dns_subdomain_message(value: str) -> str:
    return (
        f'Invalid value: "{value}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )


def validate_name(key: tuple[str, str], name: str) -> Causes:
    if key in _LABEL_NAMED:
        if len(name) > 63:
            return [("metadata.name", f'Invalid value: "{name}": must be no more than 63 characters')]
        if not _DNS_LABEL.match(name):
            return [("metadata.name", _dns_label_message(name))]
        return []
    if len(name) > 253:
        return [("metadata.name", f'Invalid value: "{name}": must be no more than 253 characters')]
    if key[0] in ("rbac.authorization.k8s.io",):
        if "/" in name or name in (".", ".."):
            return [("metadata.name", f'Invalid value: "{name}": may not contain "/"')]
        return []
    if not _DNS_SUBDOMAIN.match(name):
        return [("metadata.name", _dns_subdomain_message(name))]
    return []


def validate_labels(labels: Any, field: str) -> Causes:
    causes: Causes = []
    if labels is None:
        return causes
    if not isinstance(labels, dict):
        return [(field, "Invalid value: must be a map of strings")]
    for key, value in labels.items():
        prefix, _, name = str(key).rpartition("/")
        if (
            not name
            or len(name) > 63
            or not _LABEL_NAME.match(name)
            or (prefix and not _DNS_SUBDOMAIN.match(prefix))
        ):
            causes.append(
                (
                    field,
                    f'Invalid value: "{key}": name part must consist of alphanumeric characters, '
                    "'-', '_' or '.', and must start and end with an alphanumeric character",
                )
            )
        if not isinstance(value, str):
            causes.append((f"{field}.{key}", f"Invalid value: {value!r}: label values must be strings"))
        elif len(value) > 63:
            causes.append((field, f'Invalid value: "{value}": must be no more than 63 characters'))
        elif not _LABEL_VALUE.match(value):
            causes.append(
                (
                    field,
                    f'Invalid value: "{value}": a valid label must be an empty string or consist '
                    "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                    "alphanumeric character",
                )
            )
    return causes


def validate_metadata(meta: dict[str, Any]) -> Causes:
    causes = validate_labels(meta.get("labels"), "metadata.labels")
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            causes.append(("metadata.annotations", "Invalid value: annotation values must be strings"))
        elif sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
            causes.append(("metadata.annotations", "Too long: must have at most 262144 bytes"))
    return causes


def _validate_containers(containers: Any, field: str, required: bool = True) -> Causes:
    causes: Causes = []
    if not containers:
        if required:
            causes.append((field, "Required value"))
        return causes
    if not isinstance(containers, list):
        return [(field, "Invalid value: must be a list")]
    seen: set[str] = set()
    for index, container in enumerate(containers):
        where = f"{field}[{index}]"
        if not isinstance(container, dict):
            causes.append((where, "Invalid value: must be an object"))
            continue
        name = container.get("name")
        if not name:
            causes.append((f"{where}.name", "Required value"))
        elif not isinstance(name, str) or not _DNS_LABEL.match(name) or len(name) > 63:
            causes.append((f"{where}.name", _dns_label_message(str(name))))
        elif name in seen:
            causes.append((f"{where}.name", f'Duplicate value: "{name}"'))
        else:
            seen.add(name)
        if not container.get("image"):
            causes.append((f"{where}.image", "Required value"))
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and (
                not isinstance(value, list) or not all(isinstance(v, str) for v in value)
            ):
                causes.append((f"{where}.{key}", "Invalid value: must be a list of strings"))
        for env_index, env in enumerate(container.get("env") or []):
            env_name = env.get("name") if isinstance(env, dict) else None
            if not env_name:
                causes.append((f"{where}.env[{env_index}].name", "Required value"))
            elif not _ENV_NAME.match(env_name):
                causes.append(
                    (
                        f"{where}.env[{env_index}].name",
                        f'Invalid value: "{env_name}": a valid environment '
                        "variable name must consist of alphabetic characters, "
                        "digits, '_', '-', or '.', and must not start with a digit",
                    )
                )
            elif "value" in env and env["value"] is not None and not isinstance(env["value"], str):
                causes.append((f"{where}.env[{env_index}].value", "Invalid value: must be a string"))
    return causes


def validate_pod_spec(spec: Any, field: str, restart_policies: tuple[str, ...] | None = None) -> Causes:
    if not isinstance(spec, dict):
        return [(field, "Required value")]
    causes = _validate_containers(spec.get("containers"), f"{field}.containers")
    causes += _validate_containers(spec.get("initContainers"), f"{field}.initContainers", required=False)
    policy = spec.get("restartPolicy")
    allowed = restart_policies or ("Always", "OnFailure", "Never")
    quoted = ", ".join(f'"{value}"' for value in allowed)
    if policy is None and restart_policies:
        causes.append((f"{field}.restartPolicy", f"Required value: valid values: {quoted}"))
    elif policy is not None and policy not in allowed:
        causes.append(
            (f"{field}.restartPolicy", f'Unsupported value: "{policy}": supported values: {quoted}')
        )
    return causes


def _validate_workload(
    obj: dict[str, Any], restart_policies: tuple[str, ...] | None = None, selector_required: bool = True
) -> Causes:
    spec = obj.get("spec") or {}
    causes: Causes = []
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        causes.append(("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0"))
    template = spec.get("template") or {}
    template_labels = (template.get("metadata") or {}).get("labels") or {}
    causes += validate_labels(template_labels, "spec.template.metadata.labels")
    selector = spec.get("selector")
    if selector_required and not selector:
        causes.append(("spec.selector", "Required value"))
    elif selector and not selector_matches(selector, template_labels):
        causes.append(
            (
                "spec.template.metadata.labels",
                f"Invalid value: {template_labels}: `selector` does not match template `labels`",
            )
        )
    causes += validate_pod_spec(template.get("spec"), "spec.template.spec", restart_policies)
    return causes


def _validate_config_data(
    obj: dict[str, Any], binary_fields: tuple[str, ...], text_fields: tuple[str, ...]
) -> Causes:
    causes: Causes = []
    total = 0
    for field in binary_fields + text_fields:
        data = obj.get(field)
        if data is None:
            continue
        if not isinstance(data, dict):
            causes.append((field, "Invalid value: must be a map"))
            continue
        for key, value in data.items():
            if not _CONFIG_KEY.match(key) or len(key) > 253:
                causes.append(
                    (
                        f"{field}[{key}]",
                        f'Invalid value: "{key}": a valid config key must consist of '
                        "alphanumeric characters, '-', '_' or '.'",
                    )
                )
            if not isinstance(value, str):
                causes.append((f"{field}[{key}]", "Invalid value: must be a string"))
                continue
            if field in binary_fields:
                try:
                    total += len(base64.b64decode(value, validate=True))
                except (binascii.Error, ValueError):
                    causes.append((f"{field}[{key}]", "Invalid value: illegal base64 data"))
            else:
                total += len(value)
    if total > MAX_OBJECT_DATA:
        causes.append(("data", f"Too long: must have at most {MAX_OBJECT_DATA} bytes"))
    return causes


def validate_service(obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    causes: Causes = []
    if spec.get("type") not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        causes.append(
            (
                "spec.type",
                f'Unsupported value: "{spec.get("type")}": supported values: "ClusterIP", '
                '"ExternalName", "LoadBalancer", "NodePort"',
            )
        )
    ports = spec.get("ports") or []
    if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
        causes.append(("spec.ports", "Required value"))
    for index, port in enumerate(ports):
        if not isinstance(port.get("port"), int):
            causes.append((f"spec.ports[{index}].port", "Required value"))
        if len(ports) > 1 and not port.get("name"):
            causes.append((f"spec.ports[{index}].name", "Required value"))
    return causes


def validate_crd(obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    causes: Causes = []
    if not spec.get("group"):
        causes.append(("spec.group", "Required value"))
    if not names.get("plural"):
        causes.append(("spec.names.plural", "Required value"))
    if not names.get("kind"):
        causes.append(("spec.names.kind", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            (
                "spec.scope",
                f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"',
            )
        )
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if obj["metadata"]["name"] != expected:
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{obj["metadata"]["name"]}": must be spec.names.plural+"."+spec.group',
            )
        )
    versions = spec.get("versions") or []
    if not versions or sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            ("spec.versions", "Invalid value: must have exactly one version marked as storage version")
        )
    for index, version in enumerate(versions):
        if not version.get("name"):
            causes.append((f"spec.versions[{index}].name", "Required value"))
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None and not (spec.get("validation") or {}).get("openAPIV3Schema"):
            causes.append(
                (f"spec.versions[{index}].schema.openAPIV3Schema", "Required value: schemas are required")
            )
    return causes


def validate(key: tuple[str, str], obj: dict[str, Any]) -> Causes:
    causes = validate_metadata(obj.get("metadata") or {})
    if key == ("", "pods"):
        causes += validate_pod_spec(obj.get("spec"), "spec")
    elif key in (
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
    ):
        causes += _validate_workload(obj)
        if key == ("apps", "deployments"):
            policy = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("restartPolicy")
            if policy not in (None, "Always"):
                causes.append(
                    (
                        "spec.template.spec.restartPolicy",
                        f'Unsupported value: "{policy}": supported values: "Always"',
                    )
                )
    elif key == ("batch", "jobs"):
        causes += _validate_workload(obj, ("OnFailure", "Never"), selector_required=False)
        spec = obj.get("spec") or {}
        for field in (
            "backoffLimit",
            "activeDeadlineSeconds",
            "parallelism",
            "completions",
            "ttlSecondsAfterFinished",
        ):
            value = spec.get(field)
            if value is not None and (
                not isinstance(value, int) or value < 0 or (field == "activeDeadlineSeconds" and value == 0)
            ):
                causes.append(
                    (f"spec.{field}", f"Invalid value: {value}: must be greater than or equal to 0")
                )
    elif key == ("", "configmaps"):
        causes += _validate_config_data(obj, ("binaryData",), ("data",))
    elif key == ("", "secrets"):
        causes += _validate_config_data(obj, ("data",), ())
    elif key == ("", "services"):
        causes += validate_service(obj)
    elif key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        causes += validate_crd(obj)
    return causes


_POD_MUTABLE = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"


def _without(spec: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    import copy

    result = copy.deepcopy(spec)
    for field in ("containers", "initContainers"):
        for container in result.get(field) or []:
            container.pop("image", None)
    for path in paths:
        result.pop(path, None)
    return result


_STATEFULSET_MUTABLE = (
    "replicas",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
    "ordinals",
    "revisionHistoryLimit",
)


def validate_update(key: tuple[str, str], old: dict[str, Any], new: dict[str, Any]) -> Causes:
    """Checks that compare the new object with the stored one: fields Kubernetes makes immutable."""
    causes: Causes = []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if key == ("", "pods"):
        ignored = ["activeDeadlineSeconds", "tolerations", "nodeName", "terminationGracePeriodSeconds"]
        if _without(old_spec, ignored) != _without(new_spec, ignored):
            causes.append(("spec", f"Forbidden: pod updates may not change fields other than {_POD_MUTABLE}"))
    elif key in (("apps", "deployments"), ("apps", "replicasets"), ("apps", "daemonsets")):
        if old_spec.get("selector") != new_spec.get("selector"):
            causes.append(("spec.selector", f"Invalid value: {new_spec.get('selector')}: field is immutable"))
    elif key == ("apps", "statefulsets"):
        fixed = {k: v for k, v in old_spec.items() if k not in _STATEFULSET_MUTABLE}
        changed = {k: v for k, v in new_spec.items() if k not in _STATEFULSET_MUTABLE}
        if fixed != changed:
            causes.append(
                (
                    "spec",
                    "Forbidden: updates to statefulset spec for fields other than 'replicas', "
                    "'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', "
                    "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                )
            )
    elif key == ("batch", "jobs"):
        old_template = old_spec.get("template")
        new_template = new_spec.get("template")
        if old_template != new_template:
            causes.append(("spec.template", f"Invalid value: {_short(new_template)}: field is immutable"))
        if old_spec.get("selector") != new_spec.get("selector"):
            causes.append(("spec.selector", f"Invalid value: {new_spec.get('selector')}: field is immutable"))
        if old_spec.get("completions") != new_spec.get("completions"):
            causes.append(
                ("spec.completions", f"Invalid value: {new_spec.get('completions')}: field is immutable")
            )
    elif key == ("", "services"):
        if old_spec.get("clusterIP") and new_spec.get("clusterIP") not in (
            None,
            "",
            old_spec.get("clusterIP"),
        ):
            causes.append(
                (
                    "spec.clusterIPs[0]",
                    f'Invalid value: "{new_spec.get("clusterIP")}": may not change once set',
                )
            )
    elif key in (("", "configmaps"), ("", "secrets")):
        if old.get("immutable"):
            for field in ("data", "binaryData", "stringData"):
                if old.get(field) != new.get(field) and field != "stringData":
                    causes.append((field, "Forbidden: field is immutable when `immutable` is set"))
            if not new.get("immutable"):
                causes.append(("immutable", "Forbidden: field is immutable when `immutable` is set"))
        if key == ("", "secrets") and old.get("type") != new.get("type"):
            causes.append(("type", f'Invalid value: "{new.get("type")}": field is immutable'))
    elif key == ("apiextensions.k8s.io", "customresourcedefinitions") and old_spec.get(
        "scope"
    ) != new_spec.get("scope"):
        causes.append(("spec.scope", f'Invalid value: "{new_spec.get("scope")}": field is immutable'))
    return causes


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) < 200 else text[:200] + "..."
