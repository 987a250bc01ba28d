"""StatefulSet → Pods named <name>-<ordinal>, created in order and updated one at a time from the highest."""

from __future__ import annotations

import contextlib
from typing import Any

from .apiserver import PODS
from .controller import Controller
from .errors import ApiError
from .events import record_event
from .meta import owner_reference
from .store import clone
from .workloads import delete_pod, is_active, is_available, is_ready, new_pod, owned, pod_type, template_hash

STATEFULSETS = ("apps", "statefulsets")
PVCS = ("", "persistentvolumeclaims")
REVISION_LABEL = "controller-revision-hash"


def _ordinal(pod: dict[str, Any], name: str) -> int:
    suffix = pod["metadata"]["name"][len(name) + 1 :]
    return int(suffix) if suffix.isdigit() else -1


class StatefulSetController(Controller):
    kind = STATEFULSETS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The templates of earlier revisions, to recreate pods below the partition at their revision.
        self._templates: dict[str, dict[str, Any]] = {}

    def reconcile(self, namespace: str, name: str) -> float | None:
        sts = self.api.store.get(STATEFULSETS, namespace, name)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return None
        spec = sts.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        update_revision = f"{name}-{template_hash(spec.get('template') or {})}"
        old_status = sts.get("status") or {}
        current_revision = old_status.get("currentRevision") or update_revision
        parallel = spec.get("podManagementPolicy") == "Parallel"
        pods = {_ordinal(p, name): p for p in owned(self.api, sts, PODS)}
        for pod in list(pods.values()):
            if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded") and not pod["metadata"].get(
                "deletionTimestamp"
            ):
                delete_pod(self.api, pod)
        pods = {_ordinal(p, name): p for p in owned(self.api, sts, PODS)}
        # Create the missing ordinals: in order, each once the ones before it are ready (OrderedReady).
        for ordinal in range(desired):
            if ordinal in pods:
                if not parallel and not is_ready(pods[ordinal]):
                    break
                continue
            revision = update_revision if ordinal >= self._partition(spec) else current_revision
            template = (
                spec.get("template") if revision == update_revision else self._template_for(sts, revision)
            )
            self._ensure_claims(sts, ordinal)
            pod = new_pod(
                sts,
                template or {},
                {
                    REVISION_LABEL: revision,
                    "statefulset.kubernetes.io/pod-name": f"{name}-{ordinal}",
                    "apps.kubernetes.io/pod-index": str(ordinal),
                },
                name=f"{name}-{ordinal}",
            )
            pod["spec"]["hostname"] = f"{name}-{ordinal}"
            if spec.get("serviceName"):
                pod["spec"]["subdomain"] = spec["serviceName"]
            try:
                self.api.create(pod_type(self.api), namespace, pod)
            except ApiError as exc:
                if exc.code != 409:
                    record_event(
                        self.api, sts, "Warning", "FailedCreate", exc.message, "statefulset-controller"
                    )
                    return 5.0
            record_event(
                self.api,
                sts,
                "Normal",
                "SuccessfulCreate",
                f"create Pod {name}-{ordinal} in StatefulSet {name} successful",
                "statefulset-controller",
            )
            if not parallel:
                break
        # Remove ordinals beyond the desired count, highest first.
        extra = sorted((o for o in pods if o >= desired), reverse=True)
        for ordinal in extra:
            pod = pods[ordinal]
            if not pod["metadata"].get("deletionTimestamp"):
                delete_pod(self.api, pod)
                record_event(
                    self.api,
                    sts,
                    "Normal",
                    "SuccessfulDelete",
                    f"delete Pod {pod['metadata']['name']} in StatefulSet {name} successful",
                    "statefulset-controller",
                )
            if not parallel:
                break
        # Rolling update: replace the highest outdated pod once all the others are ready.
        strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
        pods = {_ordinal(p, name): p for p in owned(self.api, sts, PODS)}
        live = {o: p for o, p in pods.items() if o < desired}
        if (
            strategy == "RollingUpdate"
            and len(live) == desired
            and all(is_active(p) and is_ready(p) for p in live.values())
        ):
            partition = self._partition(spec)
            outdated = sorted(
                (
                    o
                    for o, p in live.items()
                    if o >= partition
                    and (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != update_revision
                ),
                reverse=True,
            )
            if outdated:
                delete_pod(self.api, live[outdated[0]])
        pods = {_ordinal(p, name): p for p in owned(self.api, sts, PODS)}
        active = [p for p in pods.values() if is_active(p)]
        updated = sum(
            1 for p in active if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == update_revision
        )
        current = sum(
            1 for p in active if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == current_revision
        )
        if updated == desired and len(active) == desired and all(is_ready(p) for p in active):
            current_revision, current = update_revision, updated
        self._remember_template(sts, update_revision)
        min_ready = int(spec.get("minReadySeconds", 0))
        status: dict[str, Any] = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(active),
            "readyReplicas": sum(1 for p in active if is_ready(p)),
            "currentReplicas": current,
            "updatedReplicas": updated,
            "availableReplicas": sum(1 for p in active if is_available(p, min_ready)),
            "currentRevision": current_revision,
            "updateRevision": update_revision,
            "collisionCount": 0,
        }
        status = {
            k: v
            for k, v in status.items()
            if v or k in ("observedGeneration", "replicas", "availableReplicas")
        }
        self.api.write_status(STATEFULSETS, sts, status)
        return None

    def _partition(self, spec: dict[str, Any]) -> int:
        return int(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition", 0) or 0)

    def _remember_template(self, sts: dict[str, Any], revision: str) -> None:
        self._templates[f"{sts['metadata']['uid']}/{revision}"] = (sts.get("spec") or {}).get(
            "template"
        ) or {}

    def _template_for(self, sts: dict[str, Any], revision: str) -> dict[str, Any] | None:
        return self._templates.get(f"{sts['metadata']['uid']}/{revision}") or (sts.get("spec") or {}).get(
            "template"
        )

    def _ensure_claims(self, sts: dict[str, Any], ordinal: int) -> None:
        meta = sts["metadata"]
        for template in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
            claim_name = f"{template['metadata']['name']}-{meta['name']}-{ordinal}"
            if self.api.store.get(PVCS, meta["namespace"], claim_name) is not None:
                continue
            claim = clone(template)
            claim.update(apiVersion="v1", kind="PersistentVolumeClaim")
            claim_meta = claim.setdefault("metadata", {})
            claim_meta["name"] = claim_name
            claim_meta["namespace"] = meta["namespace"]
            labels = dict(claim_meta.get("labels") or {})
            labels.update(((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
            claim_meta["labels"] = labels
            policy = (sts.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
            if policy.get("whenDeleted") == "Delete":
                claim_meta["ownerReferences"] = [owner_reference(sts, controller=False)]
            claim.setdefault("spec", {}).setdefault("volumeName", f"pvc-{claim_name}")
            with contextlib.suppress(ApiError):
                self.api.create(self.api.type_for(PVCS), meta["namespace"], claim)
