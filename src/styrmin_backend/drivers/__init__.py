"""Drivers on the server: Helm rendering, the deployment's configuration and action loading, beside
the driver library's spec, validation and packages (``styrmin_drivers``, which ``styrminctl`` shares),
re-exported here so the server imports drivers from one place."""

from styrmin_backend.drivers.chart_check import validate_driver
from styrmin_backend.drivers.configuration import (
    APP_VERSION_PLACEHOLDER,
    ConfigurationError,
    DeploymentConfiguration,
    check_image_overrides,
    render_image,
)
from styrmin_backend.drivers.images import component_images
from styrmin_backend.drivers.loading import ActionLoadError, load_action_flow
from styrmin_backend.drivers.render import (
    InstallChart,
    RenderError,
    prepare_install_chart,
    render_deployment,
)
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
