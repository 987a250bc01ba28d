"""Reading the configuration fields of the UI's forms, with an error per field."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError
from starlette.datastructures import FormData

from styrmin_backend.domain.deployments import ENV_VAR_NAME_RULE, is_env_var_name
from styrmin_backend.domain.errors import DomainError
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.web._common import text
from styrmin_backend.web._format import as_yaml
from styrmin_drivers._bounded_yaml import BoundedSafeLoader

_ENV_LINE = re.compile(r"^([^=]*)=(.*)$")


@dataclass
class FormErrors:
    """Errors keyed by the form field they belong beside; ``general`` for the rest."""

    fields: dict[str, str] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.fields or self.general)

    def add(self, name: str | None, message: str) -> None:
        """Put ``message`` beside field ``name`` (the first error of a field wins)."""
        if name is None:
            self.general.append(message)
        else:
            self.fields.setdefault(name, message)


def image_field(component: str) -> str:
    """The form field of a component's image override."""
    return f"image.{component}"


def env_field(component: str) -> str:
    """The form field of a component's env vars (one ``NAME=value`` a line)."""
    return f"env.{component}"


def env_text(variables: dict[str, str]) -> str:
    """Env vars as the form's textarea holds them."""
    return "\n".join(f"{name}={value}" for name, value in variables.items())


def configuration_fields(configuration: DeploymentConfiguration, components: list[str]) -> dict[str, str]:
    """The form's values for ``configuration`` (to fill the change-configuration form)."""
    filled = {"values": as_yaml(configuration.values) if configuration.values else ""}
    for component in components:
        filled[image_field(component)] = configuration.images.get(component, "")
        filled[env_field(component)] = env_text(configuration.env.get(component, {}))
    return filled


def read_configuration(form: FormData, components: list[str], errors: FormErrors) -> DeploymentConfiguration:
    """The configuration the form describes; each problem goes into ``errors`` beside its field."""
    values: dict[str, Any] = {}
    raw_values = text(form, "values").strip()
    if raw_values:
        try:
            loaded = yaml.load(raw_values, Loader=BoundedSafeLoader)  # noqa: S506 (a safe loader)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            errors.add("values", f"The values are not valid YAML{where}; write key: value, one a line.")
        else:
            if isinstance(loaded, dict):
                values = loaded
            elif loaded is not None:
                errors.add("values", "The values must be a mapping of keys to values (key: value).")
    images: dict[str, str] = {}
    env: dict[str, dict[str, str]] = {}
    for component in components:
        image = text(form, image_field(component)).strip()
        if image:
            images[component] = image
        variables: dict[str, str] = {}
        for number, line in enumerate(text(form, env_field(component)).splitlines(), start=1):
            if not line.strip():
                continue
            match = _ENV_LINE.match(line.strip())
            if match is None or not is_env_var_name(match.group(1)):
                errors.add(
                    env_field(component),
                    f"Line {number} is not NAME=value with a valid name ({ENV_VAR_NAME_RULE}).",
                )
                continue
            variables[match.group(1)] = match.group(2)
        if variables:
            env[component] = variables
    try:
        return DeploymentConfiguration(values=values, images=images, env=env)
    except ValidationError as error:
        for problem in error.errors():
            message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
            section, _, rest = message.partition(".")
            component = rest.split(":", 1)[0].split(".", 1)[0]
            name = (
                image_field(component)
                if section == "images"
                else env_field(component)
                if section == "env"
                else None
            )
            errors.add(name, message)
    # Not valid: the form shows it again with its errors; nothing else reads it.
    return DeploymentConfiguration.model_construct(values=values, images=images, env=env)


def place_error(error: DomainError, errors: FormErrors, aliases: dict[str, str]) -> None:
    """Put a service's error beside the form field its ``field`` names (through ``aliases``)."""
    name = aliases.get(error.field or "")
    errors.add(name, error.message)
