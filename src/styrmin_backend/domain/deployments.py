"""Deployments and the changes that alter them."""

from __future__ import annotations

import re

from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.domain.tasks import TaskType

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


CHANGE_TYPES = frozenset(
    {TaskType.CREATE, TaskType.CONFIGURE, TaskType.UPGRADE, TaskType.STOP, TaskType.START, TaskType.DELETE}
)


def check_deployment_name(name: str) -> None:
    """Raise InvalidInput unless ``name`` can be a Helm release name (a DNS label of at most 53)."""
    if not _DNS_LABEL.fullmatch(name):
        raise InvalidInput(
            f'"{name}" is not a valid deployment name; use 1 to 53 lower-case letters, digits or "-", '
            "starting and ending with a letter or digit.",
            field="name",
        )


def check_namespace(namespace: str) -> None:
    """Raise InvalidInput unless ``namespace`` is a valid Kubernetes namespace name."""
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidInput(
            f'"{namespace}" is not a valid namespace; use 1 to 63 lower-case letters, digits or "-", '
            "starting and ending with a letter or digit.",
            field="namespace",
        )


def check_cluster_name(cluster: str) -> None:
    """Raise InvalidInput unless ``cluster`` is a valid cluster name (as agents are registered)."""
    if not _NAMESPACE.fullmatch(cluster):
        raise InvalidInput(
            f'"{cluster}" is not a valid cluster name; use lower-case letters, digits or "-".',
            field="cluster",
        )


def next_revision(current: int) -> int:
    """The revision the next change of a deployment gets: revisions only grow."""
    return current + 1


def later_revision_wins(cluster_revision: int | None, change_revision: int) -> bool:
    """Whether the cluster already holds a revision later than this change's (so it stays unchanged)."""
    return cluster_revision is not None and cluster_revision > change_revision
