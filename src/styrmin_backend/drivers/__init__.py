"""Drivers on the server: Helm rendering, the deployment's configuration and action loading, beside
the driver library's spec, validation and packages (``styrmin_drivers``, which ``styrminctl`` shares),
re-exported here so the server imports drivers from one place.

The names backed by Helm's Go library (rendering, the chart check) load on first use: the fork server
and each action's process import this package for the configuration and action loading, and never
render, so they do without the library's 30 MB and its runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from styrmin_backend.drivers.configuration import (
    APP_VERSION_PLACEHOLDER,
    ConfigurationError,
    DeploymentConfiguration,
    check_image_overrides,
    check_values,
    render_image,
)
from styrmin_backend.drivers.images import component_images
from styrmin_backend.drivers.loading import ActionLoadError, load_action_flow
from styrmin_backend.drivers.workloads import ComponentNotRendered
from styrmin_drivers.package import (
    DriverPackage,
    pack_driver_folder,
    read_driver,
    read_driver_archive,
)
from styrmin_drivers.parsing import load_driver_spec
from styrmin_drivers.report import (
    ActionSummary,
    ComponentSummary,
    DriverError,
    DriverProblem,
    DriverReport,
)
from styrmin_drivers.spec import (
    DEFAULT_ACTION_TIMEOUT_SECONDS,
    RELEASE_NAME_PLACEHOLDER,
    SPEC_FILE_NAME,
    Action,
    Component,
    DriverSpec,
)

if TYPE_CHECKING:
    from styrmin_backend.drivers.chart_check import validate_driver
    from styrmin_backend.drivers.render import (
        InstallChart,
        RenderError,
        prepare_install_chart,
        render_deployment,
    )

_ON_FIRST_USE = {
    "validate_driver": "chart_check",
    "InstallChart": "render",
    "RenderError": "render",
    "prepare_install_chart": "render",
    "render_deployment": "render",
}
"""The Helm-backed names, and the module of this package each is imported from when first used."""


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "APP_VERSION_PLACEHOLDER",
    "DEFAULT_ACTION_TIMEOUT_SECONDS",
    "RELEASE_NAME_PLACEHOLDER",
    "SPEC_FILE_NAME",
    "Action",
    "ActionLoadError",
    "ActionSummary",
    "Component",
    "ComponentNotRendered",
    "ComponentSummary",
    "ConfigurationError",
    "DeploymentConfiguration",
    "DriverError",
    "DriverPackage",
    "DriverProblem",
    "DriverReport",
    "DriverSpec",
    "InstallChart",
    "RenderError",
    "check_image_overrides",
    "check_values",
    "component_images",
    "load_action_flow",
    "load_driver_spec",
    "pack_driver_folder",
    "prepare_install_chart",
    "read_driver",
    "read_driver_archive",
    "render_deployment",
    "render_image",
    "validate_driver",
]
