"""Defaults the API server fills in on write, as a real cluster's defaulting does for built-in kinds."""

from __future__ import annotations

import base64
from typing import Any


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def default_container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if container.get("image"):
        container.setdefault("imagePullPolicy", _image_pull_policy(str(container["image"])))
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for env in container.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef")
        if ref is not None:
            ref.setdefault("apiVersion", "v1")
    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if isinstance(probe, dict):
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            if "httpGet" in probe:
                probe["httpGet"].setdefault("path", "/")
                probe["httpGet"].setdefault("scheme", "HTTP")


def default_pod_spec(spec: dict[str, Any], restart_policy: str | None = "Always") -> None:
    if restart_policy is not None:
        spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    if "serviceAccountName" not in spec and "serviceAccount" in spec:
        spec["serviceAccountName"] = spec["serviceAccount"]
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(container, dict):
            default_container(container)


def _default_template(obj: dict[str, Any], restart_policy: str | None = "Always") -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    template.setdefault("metadata", {})
    default_pod_spec(template.setdefault("spec", {}), restart_policy)


def default_pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault(
        "tolerations",
        [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    )
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", "BestEffort")


def default_deployment(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _default_template(obj)


def default_replicaset(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {}).setdefault("replicas", 1)
    _default_template(obj)


def default_statefulset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    _default_template(obj)


def default_daemonset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _default_template(obj)


def default_job(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if "parallelism" not in spec and "completions" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    spec.setdefault("manualSelector", None)
    if spec.get("manualSelector") is None:
        spec.pop("manualSelector")
    # The template's restartPolicy has no default for Jobs: validation asks for Never or OnFailure.
    _default_template(obj, restart_policy=None)


def default_service(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        if "port" in port:
            port.setdefault("targetPort", port["port"])
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    obj.setdefault("status", {}).setdefault("loadBalancer", {})


def default_secret(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if string_data:
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data


def default_namespace(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")
    labels = obj["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def default_pvc(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Bound")
    status.setdefault("accessModes", spec.get("accessModes") or ["ReadWriteOnce"])
    requests = (spec.get("resources") or {}).get("requests") or {}
    if "storage" in requests:
        status.setdefault("capacity", {"storage": requests["storage"]})


def default_crd(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("conversion", {"strategy": "None"})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("listKind", names["kind"] + "List")
        names.setdefault("singular", names["kind"].lower())


DEFAULTERS = {
    ("", "pods"): default_pod,
    ("apps", "deployments"): default_deployment,
    ("apps", "replicasets"): default_replicaset,
    ("apps", "statefulsets"): default_statefulset,
    ("batch", "jobs"): default_job,
    ("apps", "daemonsets"): default_daemonset,
    ("", "services"): default_service,
    ("", "secrets"): default_secret,
    ("", "namespaces"): default_namespace,
    ("", "persistentvolumeclaims"): default_pvc,
    ("apiextensions.k8s.io", "customresourcedefinitions"): default_crd,
}


def apply_defaults(key: tuple[str, str], obj: dict[str, Any]) -> None:
    defaulter = DEFAULTERS.get(key)
    if defaulter is not None:
        defaulter(obj)
