"""Deployments and the changes that alter them."""

from __future__ import annotations

import re
from typing import Any, Protocol, overload

from styrmin_backend.domain.errors import InvalidInput

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]{0,255}$")
ENV_VAR_NAME_RULE = 'letters, digits, "_", "-" and ".", not starting with a digit, at most 256 characters'
"""The env var name rule in words, for errors."""


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


APP_VERSION_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
"""An application version: it becomes an image tag and a Kubernetes label value, so it is what both
take (no "+": a tag refuses it)."""
_APP_VERSION = re.compile(APP_VERSION_PATTERN)


def check_app_version(version: str) -> None:
    """Raise InvalidInput unless ``version`` can be an application version (a tag and a label)."""
    if not _APP_VERSION.fullmatch(version):
        raise InvalidInput(
            f'"{version}" is not a valid application version; use up to 63 letters, digits, ".", "_" or '
            '"-", starting and ending with a letter or digit (for example 2.1.0): it becomes an image tag '
            "and a Kubernetes label.",
            field="app_version",
        )


def check_cluster_name(cluster: str) -> None:
    """Raise InvalidInput unless ``cluster`` is a valid cluster name (as agents are registered)."""
    if not _NAMESPACE.fullmatch(cluster):
        raise InvalidInput(
            f'"{cluster}" is not a valid cluster name; use lower-case letters, digits or "-".',
            field="cluster",
        )


def is_env_var_name(name: str) -> bool:
    """Whether ``name`` can name an env var of a component container (Kubernetes' rule, bounded).

    >>> [is_env_var_name(n) for n in ("DB_URL", "my.app-key", "_x", "1BAD", "A=B", "")]
    [True, True, True, False, False, False]
    """
    return _ENV_VAR_NAME.fullmatch(name) is not None


def check_env_var_name(name: str) -> str:
    """``name`` if it can name an env var; raises ValueError saying the rule otherwise."""
    if not is_env_var_name(name):
        raise ValueError(f'"{name}" is not an env var name; use {ENV_VAR_NAME_RULE}.')
    return name


class _Counter(Protocol):
    def __add__(self, other: int, /) -> Any: ...


@overload
def next_revision(current: int) -> int: ...
@overload
def next_revision(current: _Counter) -> Any: ...
def next_revision(current: Any) -> Any:
    """The revision the next change of a deployment gets: revisions only grow.

    ``current`` may also be the store's column, so the store applies this rule in one atomic UPDATE.

    >>> next_revision(7)
    8
    """
    return current + 1


def later_revision_wins(cluster_revision: int | None, change_revision: int) -> bool:
    """Whether the cluster already holds a revision later than this change's (so it stays unchanged).

    >>> later_revision_wins(5, 4), later_revision_wins(4, 4), later_revision_wins(None, 4)
    (True, False, False)
    """
    return cluster_revision is not None and cluster_revision > change_revision
