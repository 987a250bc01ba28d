"""DaemonSet → one pod on the cluster's one node, replaced when the template changes."""

from __future__ import annotations

from typing import Any

from .apiserver import PODS
from .controller import Controller
from .errors import ApiError
from .events import record_event
from .workloads import delete_pod, is_active, is_available, is_ready, new_pod, owned, pod_type, template_hash

DAEMONSETS = ("apps", "daemonsets")
REVISION_LABEL = "controller-revision-hash"


class DaemonSetController(Controller):
    kind = DAEMONSETS

    def reconcile(self, namespace: str, name: str) -> float | None:
        ds = self.api.store.get(DAEMONSETS, namespace, name)
        if ds is None or ds["metadata"].get("deletionTimestamp"):
            return None
        spec = ds.get("spec") or {}
        revision = template_hash(spec.get("template") or {})
        pods = [p for p in owned(self.api, ds, PODS) if is_active(p)]
        current = [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        for pod in pods:
            if pod not in current and (spec.get("updateStrategy") or {}).get("type") != "OnDelete":
                delete_pod(self.api, pod)
        if not pods or (not current and (spec.get("updateStrategy") or {}).get("type") != "OnDelete"):
            pod = new_pod(
                ds,
                spec.get("template") or {},
                {
                    REVISION_LABEL: revision,
                    "pod-template-generation": str(ds["metadata"].get("generation", 1)),
                },
                generate_name=f"{name}-",
            )
            try:
                created = self.api.create(pod_type(self.api), namespace, pod)
                record_event(
                    self.api,
                    ds,
                    "Normal",
                    "SuccessfulCreate",
                    f"Created pod: {created['metadata']['name']}",
                    "daemonset-controller",
                )
            except ApiError as exc:
                record_event(self.api, ds, "Warning", "FailedCreate", exc.message, "daemonset-controller")
                return 5.0
        pods = [p for p in owned(self.api, ds, PODS) if is_active(p)]
        min_ready = int(spec.get("minReadySeconds", 0))
        updated = [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        available = sum(1 for p in pods if is_available(p, min_ready))
        status: dict[str, Any] = {
            "observedGeneration": ds["metadata"].get("generation", 1),
            "desiredNumberScheduled": 1,
            "currentNumberScheduled": min(1, len(pods)),
            "numberMisscheduled": 0,
            "numberReady": sum(1 for p in pods if is_ready(p)),
            "updatedNumberScheduled": min(1, len(updated)),
            "numberAvailable": available,
        }
        if available < 1:
            status["numberUnavailable"] = 1
        self.api.write_status(DAEMONSETS, ds, status)
        return None
