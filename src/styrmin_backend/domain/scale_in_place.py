"""When a stop or start may set a workload's replicas without a Helm upgrade.

A stop or start applies the deployment's current configuration with some components at other
replicas. When the rendered release is the one Helm last applied but for those replicas, a Helm
upgrade (a new revision, every object applied again, a wait) changes nothing else: the agent sets the
replicas instead, applying each such workload as Helm last applied it, under Helm's own field
manager, so that ``.spec.replicas`` keeps one owner and Helm's next upgrade meets no conflict.

Two rules decide it, both pure:

- :func:`release_digest`: one digest of the rendered release with the component workloads' replicas
  left out. The agent records it on each component workload it applies; a render with the digest a
  workload carries is that release but for replicas. It is keyed (HMAC) with a key of the agent's
  process: the release holds Secrets, and whoever may read a workload must not be able to test
  guesses of their values against it.
- :func:`only_replicas_differ`: the server's dry run of the apply against the live workload. Anything
  but ``.spec.replicas`` changing (a value, a label, a field Helm's manager would own or drop) says
  the workload is not as Helm last applied it, and Helm applies the chart instead.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

HELM_RELEASE_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")
"""What Helm adds to each object it applies (with the label :data:`HELM_MANAGED_BY`): a release's
ownership, which Helm checks before it adopts an object."""
HELM_MANAGED_BY = ("app.kubernetes.io/managed-by", "Helm")

_VOLATILE_METADATA = ("resourceVersion", "generation", "managedFields")
"""Metadata a write changes by itself: not a difference of what was applied."""


def release_digest(
    manifests: Sequence[Mapping[str, Any]],
    component_workloads: Collection[tuple[str, str]],
    chart: Mapping[str, Any],
    key: bytes,
) -> str:
    """A digest of a rendered release (its chart's metadata and every manifest) that leaves out the
    replicas of the component workloads, named by (kind, name): a stop or start renders the same.
    Keyed with ``key``: only who holds it can tell which release a digest is of."""
    normalised = []
    for manifest in manifests:
        metadata = manifest.get("metadata") or {}
        if (manifest.get("kind"), metadata.get("name")) in component_workloads:
            manifest = copy.deepcopy(dict(manifest))
            (manifest.get("spec") or {}).pop("replicas", None)
        normalised.append(manifest)
    text = json.dumps({"chart": chart, "manifests": normalised}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def helm_manager(live: Mapping[str, Any]) -> str | None:
    """The field manager Helm applied ``live`` with: the one whose Apply owns the release annotation.

    Helm's Go client names it after the process (``python`` under helm-python-sdk): it is read, not
    assumed. None when no Apply owns it (a release Helm applied client-side, or none)."""
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        annotations = (fields.get("f:metadata") or {}).get("f:annotations") or {}
        owns = f"f:{HELM_RELEASE_ANNOTATIONS[0]}" in annotations
        if owns and entry.get("operation") == "Apply" and not entry.get("subresource"):
            manager = entry.get("manager")
            return str(manager) if manager else None
    return None


def as_helm_applies(manifest: Mapping[str, Any], release: str, namespace: str) -> dict[str, Any]:
    """``manifest`` as Helm sends it: with the release's ownership label and annotations."""
    applied = copy.deepcopy(dict(manifest))
    metadata = applied.setdefault("metadata", {})
    metadata.setdefault("namespace", namespace)
    metadata["labels"] = {**(metadata.get("labels") or {}), HELM_MANAGED_BY[0]: HELM_MANAGED_BY[1]}
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        HELM_RELEASE_ANNOTATIONS[0]: release,
        HELM_RELEASE_ANNOTATIONS[1]: namespace,
    }
    return applied


def only_replicas_differ(live: Mapping[str, Any], dry_run: Mapping[str, Any]) -> bool:
    """Whether the dry run of an apply changes nothing of ``live`` but ``.spec.replicas``: the same
    object otherwise, and every manager owning the same fields (the apply drops and takes none)."""
    return _without_replicas(live) == _without_replicas(dry_run) and _owners(live) == _owners(dry_run)


def _without_replicas(workload: Mapping[str, Any]) -> dict[str, Any]:
    kept = copy.deepcopy(dict(workload))
    kept.pop("status", None)
    (kept.get("spec") or {}).pop("replicas", None)
    for name in _VOLATILE_METADATA:
        (kept.get("metadata") or {}).pop(name, None)
    return kept


def _owners(workload: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    entries = (workload.get("metadata") or {}).get("managedFields") or []
    return sorted(
        (
            str(entry.get("manager")),
            str(entry.get("operation")),
            str(entry.get("subresource") or ""),
            json.dumps(entry.get("fieldsV1") or {}, sort_keys=True),
        )
        for entry in entries
    )
