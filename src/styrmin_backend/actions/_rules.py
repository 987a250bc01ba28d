"""Rules every primitive shares, whatever the backend: how API failures read, and reading a component."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import styrmin
from styrmin_backend.actions._backend import ActionBackend, ApiFailed, ApiRefused, ApiUnavailable
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.drivers import Component, DriverSpec


@asynccontextmanager
async def calling_api(backend: ActionBackend, doing: str) -> AsyncIterator[None]:
    """Calls to the Styrmin API as styrmin-actions; every API error becomes an ActionError.

    ``doing`` names the call in the error, as the user reads it on the hook step:
    ``stop_components(["task-worker"]) of deployment "shop"``.
    """
    try:
        if backend.api.token is None:
            raise ActionError(
                f"{doing} cannot call the Styrmin API: {styrmin.TOKEN_ENV} is not set. Styrmin sets it for "
                "the actions it runs; to run an action elsewhere, set it to a token of a Read/write user."
            )
        yield
    except ApiUnavailable as error:
        raise ActionError(f"{doing} cannot call the Styrmin API: {error}") from None
    except ApiRefused as error:
        raise ActionError(
            f"{doing} was refused by the Styrmin API: {error} "
            f"Actions call the API as the built-in user {ACTIONS_USERNAME}, which must be active "
            "and have the role Read/write."
        ) from None
    except ApiFailed as error:
        raise ActionError(f"{doing} failed: {error}") from None


async def driver_spec(backend: ActionBackend, context: GlobalContext) -> DriverSpec:
    """The spec of the change's driver version (its components)."""
    return await backend.api.driver_spec(context.driver_name, context.driver_version)


def declared_component(spec: DriverSpec, component: str) -> Component:
    """The component ``component`` of the driver; raises ActionError naming the driver's components."""
    try:
        return spec.spec.component(component)
    except KeyError:
        names = ", ".join(c.name for c in spec.spec.components) or "none"
        raise ActionError(
            f'Driver {spec.metadata.name}@{spec.metadata.version} has no component "{component}"; '
            f"its components are: {names}."
        ) from None


async def component_pod_template(
    backend: ActionBackend, context: GlobalContext, component: Component
) -> dict[str, Any]:
    """The pod template of ``component``'s workload as it is in the cluster now, as a plain dict."""
    kind = component.workload.kind
    name = component.workload.resolved_name(context.deployment_name)
    template = await backend.cluster.pod_template(context.namespace, kind, name)
    if template is None:
        raise ActionError(
            f'Component "{component.name}" of deployment "{context.deployment_name}" has no workload: '
            f'{kind} {name} is not in namespace "{context.namespace}". Its pod template is read from '
            "the cluster, so read it once the chart is installed (in the setup post-hook, or during "
            "an upgrade)."
        )
    return template
