"""Drivers: the spec ``driver.styrmin.yml``, validation, packages, Helm rendering and action loading."""

from styrmin_backend.drivers.configuration import (
    APP_VERSION_PLACEHOLDER,
    ConfigurationError,
    DeploymentConfiguration,
    check_image_overrides,
    render_image,
)
from styrmin_backend.drivers.images import component_images
from styrmin_backend.drivers.loading import ActionLoadError, load_action_flow
from styrmin_backend.drivers.package import (
    DriverPackage,
    pack_driver_folder,
    read_driver,
    read_driver_archive,
)
from styrmin_backend.drivers.parsing import load_driver_spec
from styrmin_backend.drivers.render import (
    InstallChart,
    RenderError,
    prepare_install_chart,
    render_deployment,
)
from styrmin_backend.drivers.report import (
    ActionSummary,
    ComponentSummary,
    DriverError,
    DriverProblem,
    DriverReport,
)
from styrmin_backend.drivers.spec import (
    DEFAULT_ACTION_TIMEOUT_SECONDS,
    RELEASE_NAME_PLACEHOLDER,
    SPEC_FILE_NAME,
    Action,
    Component,
    DriverSpec,
)
from styrmin_backend.drivers.validation import validate_driver
from styrmin_backend.drivers.workloads import ComponentNotRendered

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
