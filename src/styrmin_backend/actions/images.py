"""The ``get_component_images`` primitive: the images of a component's pod template."""

from __future__ import annotations

from styrmin_backend.actions._arguments import check_context, check_name
from styrmin_backend.actions._backend import backend_for
from styrmin_backend.actions._rules import (
    calling_api,
    component_pod_template,
    declared_component,
    driver_spec,
)
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.drivers import ComponentNotRendered, component_images


async def get_component_images(component: str, context: GlobalContext) -> list[str]:
    """The image of every regular container of ``component``'s pod template, the component container's first.

    Init containers are left out and the other containers follow in pod order. When the new
    configuration overrides the component's image, the first image is that override with
    ``{{ app.version }}`` set to the target version, even before the override reaches the workload.

    Raises:
        ActionError: an argument is wrong, the driver has no such component, or its workload is not
            in the cluster.
    """
    check_name("get_component_images", "component", component, "'server'")
    check_context("get_component_images", context)
    backend = backend_for(context)
    async with calling_api(backend, f'get_component_images("{component}")'):
        spec = await driver_spec(backend, context)
    declared = declared_component(spec, component)
    template = await component_pod_template(backend, context, declared)
    try:
        return component_images(spec, component, template, context.configuration, context.target_app_version)
    except ComponentNotRendered as error:
        raise ActionError(f"get_component_images: {error}") from None
