"""Kubernetes access (lightkube) and Helm (helm-python-sdk), through a kubeconfig only.

``HelmReleases`` loads on first use: an action's process reaches the cluster through this package and
never calls Helm, so it does without Helm's Go library and its runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from styrmin_backend.cluster.kube import ClusterAccess, ClusterError, ReplicasChanged

if TYPE_CHECKING:
    from styrmin_backend.cluster.helm import HelmReleases


def __getattr__(name: str) -> Any:
    if name != "HelmReleases":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module(f"{__name__}.helm").HelmReleases
    globals()[name] = value
    return value


__all__ = ["ClusterAccess", "ClusterError", "HelmReleases", "ReplicasChanged"]
