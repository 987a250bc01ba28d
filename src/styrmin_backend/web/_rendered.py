"""The replicas and images a deployment's components get: its driver's chart rendered offline by Helm.

This is what Styrmin applies (the desired replicas and images); what the cluster runs is what the agent
reports in each component's status, which the deployment page shows beside it.
Renders are cached by driver checksum, versions and configuration, so a page pays Helm once.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from styrmin_backend.drivers import (
    ComponentNotRendered,
    ConfigurationError,
    DeploymentConfiguration,
    DriverError,
    RenderError,
    component_images,
    read_driver_archive,
    render_deployment,
)
from styrmin_backend.drivers.workloads import find_workload, pod_template_of
from styrmin_backend.services.drivers import Driver

_CACHE_SIZE = 128


@dataclass(frozen=True)
class RenderedComponent:
    """A component's workload as rendered: its replicas (None when the chart sets none) and images."""

    replicas: int | None
    images: list[str]


@dataclass(frozen=True)
class Rendered:
    """The rendered components by name, or why the chart does not render."""

    components: dict[str, RenderedComponent]
    problem: str | None = None


_cache: OrderedDict[tuple[str, ...], Rendered] = OrderedDict()
_lock = threading.Lock()


def rendered_components(
    driver: Driver, name: str, namespace: str, app_version: str, configuration: dict[str, Any]
) -> Rendered:
    """The replicas and images of each component of deployment ``name`` (in ``namespace``, at
    ``app_version`` with ``configuration``) as its driver's chart renders them."""
    key = (driver.checksum, name, namespace, app_version, json.dumps(configuration, sort_keys=True))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    rendered = _render(driver, name, namespace, app_version, configuration)
    with _lock:
        _cache[key] = rendered
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return rendered


def _render(
    driver: Driver, name: str, namespace: str, app_version: str, configuration_json: dict[str, Any]
) -> Rendered:
    try:
        package = read_driver_archive(driver.archive)
        configuration = DeploymentConfiguration.model_validate(configuration_json)
        with tempfile.TemporaryDirectory(prefix="styrmin-web-") as scratch:
            root = package.extract_to(Path(scratch))
            manifests = render_deployment(root, package.spec, name, namespace, app_version, configuration)
        components = {}
        for component in package.spec.spec.components:
            workload = find_workload(manifests, component, name)
            if workload is None:
                continue
            replicas = (workload.get("spec") or {}).get("replicas")
            images = component_images(
                package.spec, component.name, pod_template_of(workload), configuration, app_version
            )
            components[component.name] = RenderedComponent(
                replicas if isinstance(replicas, int) else None, images
            )
        return Rendered(components)
    except (RenderError, ConfigurationError, DriverError, ComponentNotRendered, ValueError) as error:
        return Rendered({}, f"The driver's chart does not render with this configuration: {error}")
