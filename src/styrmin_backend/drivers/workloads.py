"""Finding a component's workload and component container in rendered manifests or a pod template, and
the names of what the render adds beside them (the env Secret)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from styrmin_drivers.spec import Component

DEPLOYMENT_LABEL = "styrmin.io/deployment"
"""The deployment's name, on each component workload the agent applies (it lists them by it) and on an
action's Jobs and their pods."""


class ComponentNotRendered(LookupError):
    """The manifests hold no workload, or the workload no container, for a component."""


def find_workload(
    manifests: Iterable[dict[str, Any]], component: Component, release_name: str
) -> dict[str, Any] | None:
    """The manifest of ``component``'s workload in the release ``release_name``, if rendered."""
    name = component.workload.resolved_name(release_name)
    for manifest in manifests:
        metadata = manifest.get("metadata") or {}
        if manifest.get("kind") == component.workload.kind and metadata.get("name") == name:
            return manifest
    return None


def pod_template_of(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a Deployment or StatefulSet manifest (created empty where missing)."""
    spec = workload.setdefault("spec", {})
    template: dict[str, Any] = spec.setdefault("template", {})
    return template


def containers_of(pod_template: dict[str, Any]) -> list[dict[str, Any]]:
    """The regular containers of ``pod_template`` in pod order (not the init containers)."""
    containers = (pod_template.get("spec") or {}).get("containers") or []
    return [c for c in containers if isinstance(c, dict)]


def component_container(pod_template: dict[str, Any], component: Component) -> dict[str, Any]:
    """The component container: the declared ``container``, or the first container without one.

    Raises:
        ComponentNotRendered: if the pod template has no such container.
    """
    containers = containers_of(pod_template)
    if component.container is None:
        if not containers:
            raise ComponentNotRendered(f"the pod template of component {component.name} has no containers.")
        return containers[0]
    for container in containers:
        if container.get("name") == component.container:
            return container
    names = ", ".join(str(c.get("name")) for c in containers) or "none"
    raise ComponentNotRendered(
        f'the pod template of component {component.name} has no container "{component.container}"; '
        f"its containers are: {names}."
    )


def env_secret_name(release_name: str) -> str:
    """The Secret that holds a deployment's secret env vars, installed and removed with its release."""
    return f"{release_name}-styrmin-env"


def env_secret_key(component: str, variable: str) -> str:
    """The key of env var ``variable`` of ``component`` in the deployment's env Secret."""
    return f"{component}.{variable}"


CHECKSUM_KEY_ENTRY = "styrmin-checksum-key"
"""The env Secret's entry that holds the key of its workloads' secret env checksums
(``domain.secret_checksum``): no env var's key, which always holds a dot."""
