"""The kinds of objects the local cluster serves: built-in ones and those of CRDs created at run time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class ResourceType:
    """One served resource: where it lives in the API and how it behaves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # Subresources served besides the object itself, e.g. ("status", "scale").
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    # For custom resources: the CRD's version entry (schema, printer columns, scale paths).
    crd_version: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # Every version of this group/plural keeps its objects in one place.
    builtin: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        """Objects are stored once per group and plural, whatever version they are read at."""
        return (self.group, self.plural)

    def singular_name(self) -> str:
        return self.singular or self.kind.lower()


def _core(plural: str, kind: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, **kw)


def _apps(plural: str, kind: str, **kw: Any) -> ResourceType:
    return ResourceType("apps", "v1", plural, kind, True, **kw)


BUILTIN_TYPES: list[ResourceType] = [
    _core(
        "namespaces",
        "Namespace",
        False,
        short_names=("ns",),
        subresources=("status",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    _core("pods", "Pod", short_names=("po",), categories=("all",), subresources=("status", "log")),
    _core(
        "services",
        "Service",
        short_names=("svc",),
        categories=("all",),
        subresources=("status",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    _core("endpoints", "Endpoints", short_names=("ep",)),
    _core("configmaps", "ConfigMap", short_names=("cm",)),
    _core("secrets", "Secret"),
    _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    _core("events", "Event", short_names=("ev",)),
    _core("persistentvolumeclaims", "PersistentVolumeClaim", short_names=("pvc",), subresources=("status",)),
    _core("nodes", "Node", False, short_names=("no",), subresources=("status",)),
    _apps(
        "deployments",
        "Deployment",
        short_names=("deploy",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    _apps(
        "replicasets",
        "ReplicaSet",
        short_names=("rs",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    _apps(
        "statefulsets",
        "StatefulSet",
        short_names=("sts",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    _apps("daemonsets", "DaemonSet", short_names=("ds",), categories=("all",), subresources=("status",)),
    ResourceType("batch", "v1", "jobs", "Job", True, categories=("all",), subresources=("status",)),
    ResourceType(
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        True,
        short_names=("cj",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        short_names=("hpa",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        subresources=("status",),
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ResourceType(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        True,
        short_names=("ing",),
        subresources=("status",),
    ),
    ResourceType(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, short_names=("netpol",)
    ),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
        subresources=("status",),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
]


class Registry:
    """Looks resource types up by path, kind or short name; CRDs add and remove theirs at run time."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rtype in BUILTIN_TYPES:
            self.add(rtype)

    def add(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def remove_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[key]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def versions_of(self, group: str, plural: str) -> list[ResourceType]:
        return [t for t in self._types.values() if t.group == group and t.plural == plural]

    def group_versions(self) -> dict[str, list[str]]:
        """Group name to its served versions, the preferred one first ('' is the core group)."""
        groups: dict[str, list[str]] = {}
        for rtype in self._types.values():
            versions = groups.setdefault(rtype.group, [])
            if rtype.version not in versions:
                versions.append(rtype.version)
        for group, versions in groups.items():
            versions.sort(key=_version_priority)
            groups[group] = versions
        return groups


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first."""
    import re

    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0)
    major = int(match.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (stage, -major, -minor)
