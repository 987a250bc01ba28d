"""The configuration of a deployment: Helm values, and per-component image overrides and env vars."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from styrmin_backend.domain.deployments import ENV_VAR_NAME_RULE, is_env_var_name
from styrmin_backend.domain.secrets import ENCRYPTED, sealed_part
from styrmin_backend.domain.storable import unstorable_part
from styrmin_drivers.spec import DriverSpec

APP_VERSION_PLACEHOLDER = "{{ app.version }}"
"""What an image override may contain to stand for the deployment's application version."""

_APP_VERSION_PATTERN = re.compile(r"\{\{\s*app\.version\s*\}\}")


class ConfigurationError(ValueError):
    """A configuration that does not fit the driver; ``problems`` names each field and what to do."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def render_image(image: str, app_version: str) -> str:
    """``image`` with ``{{ app.version }}`` set to ``app_version``.

    >>> render_image("registry.local:5000/shop/server:{{ app.version }}-debug", "2.1.0")
    'registry.local:5000/shop/server:2.1.0-debug'
    """
    return _APP_VERSION_PATTERN.sub(app_version, image)


_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?:(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?/)?"  # registry[:port]/
    rf"{_PATH_PART}(?:/{_PATH_PART})*"  # repository
    r"(?::[\w][\w.-]{0,127})?"  # :tag
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"  # @digest
)
"""An image reference as container runtimes read one (the grammar of distribution's reference package)."""


def is_image_reference(image: str) -> bool:
    """Whether ``image`` is an image reference a container runtime can pull.

    >>> is_image_reference("registry.local:5000/shop/server:2.1.0")
    True
    >>> is_image_reference("postgres://u:secret@db/shop")
    False
    """
    return len(image) <= 512 and _IMAGE_REFERENCE.fullmatch(image) is not None


def check_image_overrides(images: dict[str, str]) -> dict[str, str]:
    """``images`` unchanged when each is an image reference that uses no template but the app version.

    Raises:
        ValueError: naming the first override that is not one, and what to write instead.
    """
    for component, image in images.items():
        sample = render_image(image, "1.0.0")
        if "{{" in sample or "}}" in sample:
            raise ValueError(
                f'images.{component}: "{image}" uses a template other than '
                f"{APP_VERSION_PLACEHOLDER}, the only one an image override may use."
            )
        if not is_image_reference(sample):
            raise ValueError(
                f'images.{component}: "{image}" is not an image reference; write '
                f"REPOSITORY:TAG, e.g. registry.local:5000/shop:{APP_VERSION_PLACEHOLDER}."
            )
    return images


def check_values(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a deployment's Helm values) if Styrmin can keep them; raises ValueError naming the
    part at fault otherwise (every way in: the API, the pages, ``apply``)."""
    found = unstorable_part(values, "values")
    if found is not None:
        raise ValueError(" ".join(found))
    if (sealed := sealed_part(values)) is not None:
        raise ValueError(
            f'{sealed} uses the key "{ENCRYPTED}", which Styrmin keeps for the secret values it stores '
            "encrypted; rename the key. Send a secret value as it is: Styrmin encrypts it."
        )
    return values


class DeploymentConfiguration(BaseModel):
    """What an operator configures on a deployment, applied on top of the driver's chart.

    ``images`` and ``env`` are keyed by component name; they go to the component container of each
    component's workload, whatever the chart does with its values.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    values: dict[str, Any] = Field(default_factory=dict, description="Helm values for the driver's chart.")
    images: dict[str, str] = Field(
        default_factory=dict,
        description=f"Image override per component; may contain {APP_VERSION_PLACEHOLDER}.",
    )
    env: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Env vars per component, set on the component container."
    )

    @field_validator("values")
    @classmethod
    def _values_are_storable(cls, values: dict[str, Any]) -> dict[str, Any]:
        return check_values(values)

    @field_validator("images")
    @classmethod
    def _images_are_references(cls, images: dict[str, str]) -> dict[str, str]:
        return check_image_overrides(images)

    @field_validator("env")
    @classmethod
    def _env_names_are_valid(cls, env: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for component, variables in env.items():
            for name in variables:
                if not is_env_var_name(name):
                    raise ValueError(
                        f'env.{component}.{name}: "{name}" is not an env var name; use {ENV_VAR_NAME_RULE}.'
                    )
        return env

    def check_components(self, spec: DriverSpec) -> None:
        """Check that every component named in ``images`` and ``env`` is one of the driver's.

        Raises:
            ConfigurationError: naming each unknown component and the driver's components.
        """
        known = [component.name for component in spec.spec.components]
        choices = _one_of(known) if known else "none: the driver declares no components"
        problems = [
            f'{section}.{name}: "{name}" is not a component of driver {spec.metadata.name}; use {choices}.'
            for section, names in (("images", self.images), ("env", self.env))
            for name in names
            if name not in known
        ]
        if problems:
            raise ConfigurationError(problems)

    def image_for(self, component: str, app_version: str) -> str | None:
        """The override of ``component``'s image with ``{{ app.version }}`` set, or ``None``."""
        image = self.images.get(component)
        return None if image is None else render_image(image, app_version)


def _one_of(names: list[str]) -> str:
    """``["a", "b", "c"]`` as ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
