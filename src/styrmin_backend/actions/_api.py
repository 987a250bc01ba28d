"""How the primitives reach the Styrmin API in the agent: the SDK, with the reconciliation's token."""

from __future__ import annotations

import asyncio
import os
import ssl
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import yaml

import styrmin
from styrmin_backend.actions._backend import ApiFailed, ApiRefused, ApiUnavailable
from styrmin_backend.drivers import SPEC_FILE_NAME, DriverSpec

WAIT_INTERVAL_SECONDS = 0.5
"""How often a primitive reads the task it waits for when the server answers at once; a current server
holds each read until the task ends (a long poll), so the primitive sees the end as it happens."""

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


@contextmanager
def _sdk_errors() -> Iterator[None]:
    try:
        yield
    except (styrmin.AuthenticationError, styrmin.ForbiddenError) as error:
        raise ApiRefused(error.message) from None
    except styrmin.StyrminError as error:
        raise ApiFailed(str(error)) from None


_specs: dict[tuple[str, str, str], DriverSpec] = {}

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_own_driver: list[Path] = []
"""The folder of the driver whose action this process runs (``run_from_driver_folder``)."""


def run_from_driver_folder(folder: Path) -> None:
    """This process runs an action of the driver unpacked in ``folder``: the spec of that driver
    version is read there, the file the registry stored it from, instead of asking the API for it."""
    _own_driver[:] = [folder]


@cache
def _spec_in(folder: Path) -> DriverSpec | None:
    """The spec in ``folder``, read with libyaml: the registry checked this file, within its bounds,
    when the driver was pushed (the bounded reader of untrusted specs takes ten times as long)."""
    try:
        text = (folder / SPEC_FILE_NAME).read_text()
        return DriverSpec.model_validate(yaml.load(text, Loader=_Loader))  # noqa: S506 - a safe loader
    except (OSError, ValueError, yaml.YAMLError):  # not readable here: the API answers instead
        return None


def _own_spec(driver_name: str, driver_version: str) -> DriverSpec | None:
    for folder in _own_driver:
        spec = _spec_in(folder)
        if spec is not None and (spec.metadata.name, spec.metadata.version) == (driver_name, driver_version):
            return spec
    return None


class SdkApi:
    """The Styrmin API at ``url`` through the SDK, as the user whose token is in STYRMIN_TOKEN."""

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def _client(self) -> styrmin.AsyncClient:
        try:
            return _client_for(self.url)
        except styrmin.StyrminError as error:
            raise ApiUnavailable(error.message) from None

    @property
    def token(self) -> str | None:
        return os.environ.get(styrmin.TOKEN_ENV, "").strip() or None

    async def driver_spec(self, driver_name: str, driver_version: str) -> DriverSpec:
        key = (self.url, driver_name, driver_version)
        if key not in _specs and (own := _own_spec(driver_name, driver_version)) is not None:
            _specs[key] = own
        if key not in _specs:
            with _sdk_errors():
                driver = await self._client.drivers.get(driver_name, driver_version)
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

    async def request_components(
        self, deployment: str, components: list[str], *, running: bool, started_by_step: int
    ) -> int | None:
        client = self._client
        call = client.deployments.start if running else client.deployments.stop
        with _sdk_errors():
            change = await call(deployment, components, started_by_step=started_by_step)
        return None if change.task is None else change.task.id

    async def request_upgrade(
        self, deployment: str, *, app_version: str, driver_version: str, started_by_step: int
    ) -> int | None:
        with _sdk_errors():
            change = await self._client.deployments.upgrade(
                deployment,
                app_version=app_version,
                driver_version=driver_version,
                started_by_step=started_by_step,
            )
        return None if change.task is None else change.task.id

    async def request_backup(self, deployment: str, *, started_by_step: int) -> int:
        with _sdk_errors():
            taken = await self._client.backups.create(deployment, started_by_step=started_by_step)
        return taken.task.id

    async def configured_env(self, task_id: int, component: str) -> dict[str, str]:
        with _sdk_errors():
            configuration = await self._client.tasks.configuration(task_id)
        return dict(configuration.env.get(component, {}))

    async def wait_for_task(self, task_id: int) -> styrmin.Task:
        with _sdk_errors():
            return await self._client.tasks.wait(task_id, interval=WAIT_INTERVAL_SECONDS)

    async def add_step_note(self, step_id: int, note: str) -> None:
        with _sdk_errors():
            await self._client.steps.add_note(step_id, note)

    async def store_step_output(self, step_id: int, tail: str, truncated: bool) -> None:
        with _sdk_errors():
            await self._client.steps.store_output(step_id, tail, truncated=truncated)
