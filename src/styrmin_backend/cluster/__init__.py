"""Kubernetes access (lightkube) and Helm (helm-python-sdk), through a kubeconfig only.

Each name loads on first use. An action's process reaches the cluster through this package and never
calls Helm, so it does without Helm's Go library and its runtime; a process that reads only the
connection's settings (``styrmin up``'s server reads the agent's) does without lightkube.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from styrmin_backend.cluster.helm import HelmReleases
    from styrmin_backend.cluster.kube import ClusterAccess, ClusterError, ReplicasChanged

_MODULE_OF = {
    "ClusterAccess": "kube",
    "ClusterError": "kube",
    "ReplicasChanged": "kube",
    "HelmReleases": "helm",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


__all__ = ["ClusterAccess", "ClusterError", "HelmReleases", "ReplicasChanged"]
