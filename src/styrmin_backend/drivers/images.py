"""Reading a component's images, as the ``get_component_images`` primitive returns them."""

from __future__ import annotations

from typing import Any

from styrmin_backend.drivers.configuration import DeploymentConfiguration
from styrmin_backend.drivers.workloads import component_container, containers_of
from styrmin_drivers.spec import DriverSpec


def component_images(
    spec: DriverSpec,
    component: str,
    pod_template: dict[str, Any],
    configuration: DeploymentConfiguration,
    app_version: str,
) -> list[str]:
    """The image of every regular container of ``component``'s pod template, component container first.

    Init containers are left out; the other containers follow in pod order. When ``configuration``
    overrides the component's image, the first image is that override with ``{{ app.version }}`` set
    to ``app_version`` (the target version during an upgrade), even when the workload does not have it
    yet.

    Raises:
        KeyError: if the driver has no component ``component``.
        ComponentNotRendered: if the pod template lacks the component container.
    """
    declared = spec.spec.component(component)
    first = component_container(pod_template, declared)
    others = [c for c in containers_of(pod_template) if c is not first]
    override = configuration.image_for(component, app_version)
    first_image = override if override is not None else str(first.get("image", ""))
    return [first_image, *(str(c.get("image", "")) for c in others)]
