"""Deployment → ReplicaSets → Pods, with the status fields `kubectl rollout status` and Helm's wait read."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from .apiserver import PODS
from .controller import Controller
from .errors import ApiError
from .events import record_event
from .meta import owner_reference, parse_time, set_condition
from .store import clone
from .workloads import (
    delete_pod,
    is_active,
    is_available,
    is_ready,
    new_pod,
    owned,
    pod_type,
    resolve_int_or_percent,
    template_hash,
)

DEPLOYMENTS = ("apps", "deployments")
REPLICASETS = ("apps", "replicasets")
REVISION = "deployment.kubernetes.io/revision"
HASH_LABEL = "pod-template-hash"


class ReplicaSetController(Controller):
    kind = REPLICASETS

    def reconcile(self, namespace: str, name: str) -> float | None:
        rs = self.api.store.get(REPLICASETS, namespace, name)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return None
        spec = rs.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        pods = owned(self.api, rs, PODS)
        active = [p for p in pods if is_active(p)]
        for pod in pods:
            if (pod.get("status") or {}).get("phase") == "Failed" and not pod["metadata"].get(
                "deletionTimestamp"
            ):
                delete_pod(self.api, pod)
        if len(active) < desired:
            for _ in range(desired - len(active)):
                pod = new_pod(rs, spec.get("template") or {}, {}, generate_name=f"{name}-")
                try:
                    created = self.api.create(pod_type(self.api), namespace, pod)
                except ApiError as exc:
                    record_event(
                        self.api,
                        rs,
                        "Warning",
                        "FailedCreate",
                        f"Error creating: {exc.message}",
                        "replicaset-controller",
                    )
                    return 5.0
                record_event(
                    self.api,
                    rs,
                    "Normal",
                    "SuccessfulCreate",
                    f"Created pod: {created['metadata']['name']}",
                    "replicaset-controller",
                )
        elif len(active) > desired:
            # Remove pods that are not ready first, then the newest.
            ranked = sorted(
                active,
                key=lambda p: (is_ready(p), p["metadata"].get("creationTimestamp", "")),
            )
            doomed = sorted(ranked[: len(active) - desired], key=lambda p: p["metadata"]["name"])
            for pod in doomed:
                delete_pod(self.api, pod)
                record_event(
                    self.api,
                    rs,
                    "Normal",
                    "SuccessfulDelete",
                    f"Deleted pod: {pod['metadata']['name']}",
                    "replicaset-controller",
                )
        pods = [p for p in owned(self.api, rs, PODS) if is_active(p)]
        min_ready = int(spec.get("minReadySeconds", 0))
        ready = sum(1 for p in pods if is_ready(p))
        available = sum(1 for p in pods if is_available(p, min_ready))
        status: dict[str, Any] = {
            "replicas": len(pods),
            "fullyLabeledReplicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        status = {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration")}
        self.api.write_status(REPLICASETS, rs, status)
        return float(min_ready) if ready > available else None


class DeploymentController(Controller):
    kind = DEPLOYMENTS

    def reconcile(self, namespace: str, name: str) -> float | None:
        deployment = self.api.store.get(DEPLOYMENTS, namespace, name)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return None
        spec = deployment.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        template = clone(spec.get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {}).pop(HASH_LABEL, None)
        pod_hash = template_hash(template)
        replica_sets = owned(self.api, deployment, REPLICASETS)
        new_rs = next(
            (
                rs
                for rs in replica_sets
                if ((rs.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).get(HASH_LABEL)
                == pod_hash
            ),
            None,
        )
        old_sets = [rs for rs in replica_sets if rs is not new_rs]
        revisions = [
            int((rs["metadata"].get("annotations") or {}).get(REVISION, "0") or 0) for rs in replica_sets
        ]
        max_revision = max(revisions, default=0)
        paused = bool(spec.get("paused"))
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        created_now = False
        if not paused:
            old_running = any(
                int((rs.get("spec") or {}).get("replicas", 0)) > 0
                or (rs.get("status") or {}).get("replicas", 0)
                for rs in old_sets
            )
            if new_rs is None:
                new_rs = self._create_replica_set(
                    deployment,
                    template,
                    pod_hash,
                    max_revision + 1,
                    0 if recreate and old_running else desired,
                )
                if new_rs is None:
                    return 5.0
                created_now = True
            else:
                new_rs = self._sync_replica_set(
                    deployment, new_rs, max_revision, desired, recreate and old_running
                )
            new_status = new_rs.get("status") or {}
            new_complete = (
                new_status.get("availableReplicas", 0) >= desired
                and int((new_rs.get("spec") or {}).get("replicas", 0)) == desired
            )
            for rs in old_sets:
                if int((rs.get("spec") or {}).get("replicas", 0)) > 0 and (
                    new_complete or recreate or desired == 0
                ):
                    self._scale(rs, 0)
            self._prune_history(deployment, old_sets)
        return self._write_status(deployment, new_rs, owned(self.api, deployment, REPLICASETS), created_now)

    def _create_replica_set(
        self,
        deployment: dict[str, Any],
        template: dict[str, Any],
        pod_hash: str,
        revision: int,
        replicas: int,
    ) -> dict[str, Any] | None:
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        template = clone(template)
        template["metadata"]["labels"][HASH_LABEL] = pod_hash
        selector = clone(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
        annotations = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if k not in ("kubectl.kubernetes.io/last-applied-configuration", REVISION)
        }
        annotations.update(
            {
                REVISION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                "deployment.kubernetes.io/max-replicas": str(
                    int(spec.get("replicas", 1))
                    + resolve_int_or_percent(
                        ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxSurge", "25%"),
                        int(spec.get("replicas", 1)),
                        True,
                    )
                ),
            }
        )
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{pod_hash}",
                "namespace": meta["namespace"],
                "labels": dict(template["metadata"]["labels"]),
                "annotations": annotations,
                "ownerReferences": [owner_reference(deployment)],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": int(spec.get("minReadySeconds", 0)),
                "selector": selector,
                "template": template,
            },
        }
        try:
            created = self.api.create(self.api.type_for(REPLICASETS), meta["namespace"], rs)
        except ApiError as exc:
            record_event(
                self.api, deployment, "Warning", "FailedCreate", exc.message, "deployment-controller"
            )
            return None
        record_event(
            self.api,
            deployment,
            "Normal",
            "ScalingReplicaSet",
            f"Scaled up replica set {created['metadata']['name']} from 0 to {replicas}",
            "deployment-controller",
        )
        return created

    def _sync_replica_set(
        self, deployment: dict[str, Any], rs: dict[str, Any], max_revision: int, desired: int, hold: bool
    ) -> dict[str, Any]:
        updated = clone(rs)
        annotations = updated["metadata"].setdefault("annotations", {})
        revision = int(annotations.get(REVISION, "0") or 0)
        if revision < max_revision:
            annotations[REVISION] = str(max_revision + 1)
        annotations["deployment.kubernetes.io/desired-replicas"] = str(desired)
        replicas = 0 if hold else desired
        before = int((rs.get("spec") or {}).get("replicas", 0))
        updated["spec"]["replicas"] = replicas
        updated["spec"]["minReadySeconds"] = int((deployment.get("spec") or {}).get("minReadySeconds", 0))
        if updated == rs:
            return rs
        if before != replicas:
            record_event(
                self.api,
                deployment,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {'up' if replicas > before else 'down'} replica set {rs['metadata']['name']} "
                f"from {before} to {replicas}",
                "deployment-controller",
            )
        return self.api.write(REPLICASETS, updated)

    def _scale(self, rs: dict[str, Any], replicas: int) -> None:
        updated = clone(rs)
        before = updated["spec"].get("replicas", 0)
        updated["spec"]["replicas"] = replicas
        self.api.write(REPLICASETS, updated)
        owner = self.api.get_by_uid(next((r["uid"] for r in rs["metadata"].get("ownerReferences") or []), ""))
        if owner is not None:
            record_event(
                self.api,
                owner[1],
                "Normal",
                "ScalingReplicaSet",
                f"Scaled down replica set {rs['metadata']['name']} from {before} to {replicas}",
                "deployment-controller",
            )

    def _prune_history(self, deployment: dict[str, Any], old_sets: list[dict[str, Any]]) -> None:
        limit = int((deployment.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in old_sets
            if int((rs.get("spec") or {}).get("replicas", 0)) == 0
            and not (rs.get("status") or {}).get("replicas")
        ]
        idle.sort(key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION, "0") or 0))
        for rs in idle[: max(0, len(idle) - limit)]:
            with contextlib.suppress(ApiError):
                self.api.delete(
                    self.api.type_for(REPLICASETS), rs["metadata"]["namespace"], rs["metadata"]["name"]
                )

    def _write_status(
        self,
        deployment: dict[str, Any],
        new_rs: dict[str, Any] | None,
        replica_sets: list[dict[str, Any]],
        created_now: bool,
    ) -> float | None:
        spec = deployment.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        old_status = deployment.get("status") or {}
        total = sum((rs.get("status") or {}).get("replicas", 0) for rs in replica_sets)
        ready = sum((rs.get("status") or {}).get("readyReplicas", 0) for rs in replica_sets)
        available = sum((rs.get("status") or {}).get("availableReplicas", 0) for rs in replica_sets)
        updated = (new_rs.get("status") or {}).get("replicas", 0) if new_rs else 0
        if new_rs is not None:
            new_current = self.api.store.get(
                REPLICASETS, new_rs["metadata"]["namespace"], new_rs["metadata"]["name"]
            )
            if new_current is not None:
                updated = (new_current.get("status") or {}).get("replicas", 0)
        strategy = spec.get("strategy") or {}
        max_unavailable = (
            0
            if strategy.get("type") == "Recreate"
            else resolve_int_or_percent(
                (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%"), desired, False
            )
        )
        conditions = list(old_status.get("conditions") or [])
        if available >= desired - max_unavailable:
            conditions = set_condition(
                conditions,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                probe_time=True,
            )
        else:
            conditions = set_condition(
                conditions,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                probe_time=True,
            )
        rs_name = new_rs["metadata"]["name"] if new_rs else ""
        complete = new_rs is not None and updated == desired and total == desired and available >= desired
        requeue: float | None = None
        previous = next((c for c in conditions if c.get("type") == "Progressing"), None)
        if spec.get("paused"):
            conditions = set_condition(
                conditions,
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused",
                probe_time=True,
            )
        elif complete:
            conditions = set_condition(
                conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
                probe_time=True,
            )
        elif created_now:
            conditions = set_condition(
                conditions,
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                f'Created new replica set "{rs_name}"',
                probe_time=True,
            )
        else:
            deadline = int(spec.get("progressDeadlineSeconds", 600))
            progressed_at = parse_time((previous or {}).get("lastUpdateTime")) or time.time()
            if previous is not None and previous.get("reason") == "ProgressDeadlineExceeded":
                pass
            elif (
                previous is not None
                and previous.get("reason")
                in ("ReplicaSetUpdated", "NewReplicaSetCreated", "FoundNewReplicaSet")
                and time.time() - progressed_at > deadline
            ):
                conditions = set_condition(
                    conditions,
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    f'ReplicaSet "{rs_name}" has timed out progressing.',
                    probe_time=True,
                )
            elif (
                previous is None
                or previous.get("reason") != "ReplicaSetUpdated"
                or previous.get("status") != "True"
                or previous.get("message") != f'ReplicaSet "{rs_name}" is progressing.'
            ):
                conditions = set_condition(
                    conditions,
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    f'ReplicaSet "{rs_name}" is progressing.',
                    probe_time=True,
                )
                requeue = float(deadline) + 1
            else:
                requeue = max(1.0, deadline - (time.time() - progressed_at) + 1)
        conditions.sort(
            key=lambda c: (
                ["Available", "Progressing"].index(c["type"])
                if c["type"] in ("Available", "Progressing")
                else 2
            )
        )
        status: dict[str, Any] = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": max(0, total - available) if total else max(0, desired - available),
            "conditions": conditions,
        }
        status = {k: v for k, v in status.items() if v or k in ("observedGeneration", "conditions")}
        self.api.write_status(DEPLOYMENTS, deployment, status)
        return requeue
