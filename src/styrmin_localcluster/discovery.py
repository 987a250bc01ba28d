"""Discovery documents: /api, /apis, and the resource list of each group version; /version."""

from __future__ import annotations

import hashlib
import platform
from typing import Any

from .resources import Registry, ResourceType

KUBERNETES_VERSION = "v1.33.0"


def version_info() -> dict[str, Any]:
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": f"linux/{'arm64' if platform.machine() in ('aarch64', 'arm64') else 'amd64'}",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = registry.group_versions()
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            _group(name, versions) for name, versions in sorted(groups.items(), key=_group_order) if name
        ],
    }


_GROUP_ORDER = [
    "apps",
    "batch",
    "apiextensions.k8s.io",
    "rbac.authorization.k8s.io",
    "networking.k8s.io",
    "policy",
    "coordination.k8s.io",
]


def _group_order(item: tuple[str, list[str]]) -> tuple[int, str]:
    name = item[0]
    return (_GROUP_ORDER.index(name) if name in _GROUP_ORDER else len(_GROUP_ORDER), name)


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(group)
    if not versions:
        return None
    return dict(_group(group, versions), kind="APIGroup", apiVersion="v1")


def _storage_hash(rtype: ResourceType) -> str:
    return hashlib.sha256(f"{rtype.group}/{rtype.version}/{rtype.kind}".encode()).digest()[:8].hex()


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [t for t in registry.all() if t.group == group and t.version == version]
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rtype in sorted(types, key=lambda t: t.plural):
        entry: dict[str, Any] = {
            "name": rtype.plural,
            "singularName": rtype.singular_name(),
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": list(rtype.verbs),
            "storageVersionHash": _storage_hash(rtype),
        }
        if rtype.short_names:
            entry["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            entry["categories"] = list(rtype.categories)
        resources.append(entry)
        for sub in rtype.subresources:
            sub_entry: dict[str, Any] = {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": ["get", "patch", "update"],
            }
            if sub == "scale":
                sub_entry.update(group="autoscaling", version="v1", kind="Scale")
            elif sub == "log":
                sub_entry["verbs"] = ["get"]
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
