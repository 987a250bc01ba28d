"""The ``get_component_images`` primitive: the images of a component's pod template."""

from __future__ import annotations

from styrmin_backend.actions._api import declared_component, driver_spec, styrmin_client
from styrmin_backend.actions._kube import component_pod_template, kube_client
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.drivers import ComponentNotRendered, component_images


async def get_component_images(component: str, context: GlobalContext) -> list[str]:
    """The image of every regular container of ``component``'s pod template, the component container's first.

    Init containers are left out and the other containers follow in pod order. When the new
    configuration overrides the component's image, the first image is that override with
    ``{{ app.version }}`` set to the target version, even before the override reaches the workload.

    Raises:
        ActionError: the driver has no such component, or its workload is not in the cluster.
    """
    async with styrmin_client(context, f'get_component_images("{component}")') as client:
        spec = await driver_spec(client, context)
    declared = declared_component(spec, component)
    async with kube_client() as kube:
        template = await component_pod_template(kube, context, declared)
    try:
        return component_images(spec, component, template, context.configuration, context.target_app_version)
    except ComponentNotRendered as error:
        raise ActionError(f"get_component_images: {error}") from None
