"""How the primitives reach the Styrmin API: the SDK, with the reconciliation's token from STYRMIN_TOKEN."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from typing import Any

import httpx

import styrmin
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.drivers import Component, DriverSpec

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], styrmin.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)
"""One SDK client per event loop, URL and token: a new client costs ~60 ms (its TLS context), and an
action calls several primitives in a row. The action's process ends with its action, closing them."""


@cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings every SDK client of this process shares: loading the CA bundle takes ~50 ms
    (much more on a busy machine), so it is done once, by the runner process before its job arrives."""
    return httpx.create_ssl_context()


def _client_for(url: str) -> styrmin.AsyncClient:
    token = os.environ.get(styrmin.TOKEN_ENV, "").strip()
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (url, token)
    if key not in per_loop:
        per_loop[key] = styrmin.AsyncClient(url=url, token=token or None, verify=tls_context())
    return per_loop[key]


@asynccontextmanager
async def styrmin_client(context: GlobalContext, doing: str) -> AsyncIterator[styrmin.AsyncClient]:
    """An SDK client for ``context``'s API, as styrmin-actions; every API error becomes an ActionError.

    ``doing`` names the call in the error, as the user reads it on the hook step:
    ``stop_components(["task-worker"]) of deployment "shop"``.
    """
    try:
        client = _client_for(context.api_url)
    except styrmin.StyrminError as error:
        raise ActionError(f"{doing} cannot call the Styrmin API: {error.message}") from None
    if client.token is None:
        raise ActionError(
            f"{doing} cannot call the Styrmin API: {styrmin.TOKEN_ENV} is not set. Styrmin sets it for the "
            "actions it runs; to run an action elsewhere, set it to a token of a Read/write user."
        )
    try:
        yield client
    except (styrmin.AuthenticationError, styrmin.ForbiddenError) as error:
        raise ActionError(
            f"{doing} was refused by the Styrmin API: {error.message} "
            f"Actions call the API as the built-in user {ACTIONS_USERNAME}, which must be active "
            "and have the role Read/write."
        ) from None
    except styrmin.StyrminError as error:
        raise ActionError(f"{doing} failed: {error}") from None


async def add_step_note(client: styrmin.AsyncClient, step_id: int, note: str) -> None:
    """Add a line to the hook step's notes (the server redacts it)."""
    await client.steps.add_note(step_id, note)


async def store_step_output(client: styrmin.AsyncClient, step_id: int, tail: str, truncated: bool) -> None:
    """Store the kept end of a failed command's output on the hook step."""
    await client.steps.store_output(step_id, tail, truncated=truncated)


_specs: dict[tuple[str, str, str], DriverSpec] = {}


async def driver_spec(client: styrmin.AsyncClient, context: GlobalContext) -> DriverSpec:
    """The spec of the change's driver version (its components), as the registry stores it."""
    key = (client.url, context.driver_name, context.driver_version)
    if key not in _specs:
        driver = await client.drivers.get(context.driver_name, context.driver_version)
        document: dict[str, Any] = {
            "apiVersion": "styrmin.io/v1",
            "kind": "Driver",
            "metadata": {"name": driver.name, "version": driver.version},
            "spec": {
                "application": {
                    "name": driver.application.name,
                    "defaultVersion": driver.application.default_version,
                },
                "components": [
                    {
                        "name": c.name,
                        "workload": {"kind": c.workload_kind, "name": c.workload_name},
                        **({"container": c.container} if c.container else {}),
                    }
                    for c in driver.components
                ],
            },
        }
        _specs[key] = DriverSpec.model_validate(document)
    return _specs[key]


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


_log = logging.getLogger("styrmin.actions")


def log_progress(message: str) -> None:
    """Log what a primitive did to the action's flow run (shown in the Prefect UI), else to Python's log."""
    try:
        from prefect import get_run_logger

        get_run_logger().info(message)
    except Exception:  # not in a flow run (a test calling the primitive directly)
        _log.info(message)
