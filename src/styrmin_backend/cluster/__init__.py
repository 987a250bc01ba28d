"""Kubernetes access (lightkube) and Helm (helm-python-sdk), through a kubeconfig only."""

from styrmin_backend.cluster.helm import HelmReleases
from styrmin_backend.cluster.kube import ClusterAccess, ClusterError, ReplicasChanged

__all__ = ["ClusterAccess", "ClusterError", "HelmReleases", "ReplicasChanged"]
