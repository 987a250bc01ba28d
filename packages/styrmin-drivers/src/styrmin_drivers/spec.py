"""The driver specification ``driver.styrmin.yml``, modelled with pydantic.

These models check the shape of one spec (types, names, hooks, modes, locations). The rules that
relate several entries (unique names, no ``core`` action on the setup hook) are
:func:`spec_rule_violations`, which the model applies too, so a :class:`DriverSpec` that exists is
always a valid one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from styrmin_drivers.hooks import Hook, Mode, hook_has_driver_core

SPEC_FILE_NAME = "driver.styrmin.yml"
"""The name of the spec file at the root of every driver."""

DEFAULT_CHART_PATH = "chart"
"""Where the Helm chart lives inside a driver when ``spec.chart.path`` is not given."""

DEFAULT_ACTION_TIMEOUT_SECONDS = 3600
"""How long an action may run when its ``timeout`` is not given: one hour, for long migrations."""

MAX_ACTION_TIMEOUT_SECONDS = 7 * 24 * 3600

RELEASE_NAME_PLACEHOLDER = "{{ .Release.Name }}"
"""What a component's workload name may contain to stand for the deployment's Helm release name."""

_RELEASE_NAME_PATTERN = re.compile(r"\{\{-?\s*\.Release\.Name\s*-?\}\}")
_DRIVER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_APP_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_ACTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HOOK_VALUES = frozenset(hook.value for hook in Hook)
_LOCATION = re.compile(r"^(?P<file>[^:\s]+\.py)::(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")


def resolve_workload_name(name: str, release_name: str) -> str:
    """The workload name the chart renders for ``release_name``: ``{{ .Release.Name }}`` substituted.

    >>> resolve_workload_name("{{ .Release.Name }}-server", "shop")
    'shop-server'
    """
    return _RELEASE_NAME_PATTERN.sub(release_name, name)


def parse_location(location: str) -> tuple[str, str]:
    """Split an action location ``FILE.py::FUNCTION`` into its file and function.

    Raises:
        ValueError: if ``location`` is not of that form.
    """
    match = _LOCATION.match(location)
    if match is None:
        raise ValueError(f'"{location}" is not an action location; write FILE.py::FUNCTION.')
    return match["file"], match["function"]


def _driver_name(value: str) -> str:
    if len(value) > 53 or not _DRIVER_NAME.match(value):
        raise PydanticCustomError(
            "driver_name",
            '"{value}" is not a driver name; use at most 53 lowercase letters, digits and "-", '
            "starting and ending with a letter or digit, e.g. shop.",
            {"value": value},
        )
    return value


def _semantic_version(value: str) -> str:
    if not _SEMVER.match(value):
        raise PydanticCustomError(
            "semantic_version",
            '"{value}" is not a semantic version; use MAJOR.MINOR.PATCH, e.g. 1.0.0.',
            {"value": value},
        )
    return value


def _application_version(value: str) -> str:
    if len(value) > 128 or not _APP_VERSION.match(value):
        raise PydanticCustomError(
            "application_version",
            '"{value}" is not an application version; use letters, digits, ".", "_", "+" and "-", '
            "as in an image tag, e.g. 2.1.0.",
            {"value": value},
        )
    return value


def _relative_path(value: str) -> str:
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
        raise PydanticCustomError(
            "driver_path",
            '"{value}" is not a path inside the driver; use a relative path such as chart.',
            {"value": value},
        )
    return value


def _component_name(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise PydanticCustomError(
            "component_name",
            '"{value}" is not a component name; use lowercase letters, digits and "-", e.g. task-worker.',
            {"value": value},
        )
    return value


def _workload_name(value: str) -> str:
    sample = resolve_workload_name(value, "release")
    if "{{" in sample or "}}" in sample:
        raise PydanticCustomError(
            "workload_name",
            '"{value}" uses a template other than {placeholder}; the workload name may only use '
            "{placeholder} for the release name.",
            {"value": value, "placeholder": RELEASE_NAME_PLACEHOLDER},
        )
    if len(sample) > 253 or not _DNS_SUBDOMAIN.match(sample):
        raise PydanticCustomError(
            "workload_name",
            '"{value}" is not a Kubernetes object name; use lowercase letters, digits, "-" and ".", '
            "and {placeholder} for the release name.",
            {"value": value, "placeholder": RELEASE_NAME_PLACEHOLDER},
        )
    return value


def _container_name(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise PydanticCustomError(
            "container_name",
            '"{value}" is not a container name; use lowercase letters, digits and "-".',
            {"value": value},
        )
    return value


def _action_name(value: str) -> str:
    if len(value) > 63 or not _ACTION_NAME.match(value):
        raise PydanticCustomError(
            "action_name",
            '"{value}" is not an action name; use letters, digits, "_", "." and "-", e.g. pre_setup.',
            {"value": value},
        )
    return value


def _location(value: str) -> str:
    match = _LOCATION.match(value)
    if match is None:
        raise PydanticCustomError(
            "action_location",
            '"{value}" is not an action location; write FILE.py::FUNCTION, e.g. actions.py::upgrade.',
            {"value": value},
        )
    _relative_path(match["file"])
    return value


def _pattern(regex: re.Pattern[str]) -> Any:
    """The regex in the JSON Schema for editors; the validator above gives the error people read."""
    # Named groups are spelled differently in Python and in the ECMAScript regexes editors use.
    return Field(json_schema_extra={"pattern": re.sub(r"\(\?P<\w+>", "(", regex.pattern)})


DriverName = Annotated[str, AfterValidator(_driver_name), _pattern(_DRIVER_NAME)]
SemanticVersion = Annotated[str, AfterValidator(_semantic_version), _pattern(_SEMVER)]
ApplicationVersion = Annotated[str, AfterValidator(_application_version), _pattern(_APP_VERSION)]
ComponentName = Annotated[str, AfterValidator(_component_name), _pattern(_DNS_LABEL)]


class _SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class DriverMetadata(_SpecModel):
    """Who the driver is: ``name@version``."""

    name: DriverName = Field(description="The driver's name, e.g. shop.")
    version: SemanticVersion = Field(description="The driver's semantic version, e.g. 1.0.0.")
    description: str | None = Field(default=None, description="What the driver deploys, in one line.")


class Application(_SpecModel):
    """The application the driver deploys."""

    name: str = Field(min_length=1, description="The application's name as users know it.")
    default_version: ApplicationVersion = Field(
        alias="defaultVersion",
        description="The application version a new deployment gets when its request names none.",
    )


class ChartReference(_SpecModel):
    """Where the driver's Helm chart is."""

    path: Annotated[str, AfterValidator(_relative_path)] = Field(
        default=DEFAULT_CHART_PATH, description="The chart's folder inside the driver."
    )


class Workload(_SpecModel):
    """The Deployment or StatefulSet that the chart renders for a component."""

    kind: Literal["Deployment", "StatefulSet"] = Field(description="Deployment or StatefulSet.")
    name: Annotated[str, AfterValidator(_workload_name)] = Field(
        description=(
            "The workload's name as the chart renders it; "
            f"{RELEASE_NAME_PLACEHOLDER} stands for the deployment's release name."
        )
    )

    def resolved_name(self, release_name: str) -> str:
        """The workload's name in the release ``release_name``."""
        return resolve_workload_name(self.name, release_name)


class Component(_SpecModel):
    """A part of the application that runs as one workload."""

    name: ComponentName = Field(description="The component's name, e.g. server or task-worker.")
    workload: Workload
    container: Annotated[str, AfterValidator(_container_name), _pattern(_DNS_LABEL)] | None = Field(
        default=None,
        description=(
            "The component container: the container of the pod template that is the component's. "
            "Image overrides and env vars go to it. Without it, the first container is."
        ),
    )


class Action(_SpecModel):
    """Python code of the driver that runs at a hook, as a Prefect flow."""

    name: Annotated[str, AfterValidator(_action_name), _pattern(_ACTION_NAME)] = Field(
        description="Unique within the driver."
    )
    hook: Hook = Field(description="When the action runs: setup, upgrade, backup or restore.")
    mode: Mode = Field(description="pre, core or post: before, as, or after the hook's main operation.")
    location: Annotated[str, AfterValidator(_location), _pattern(_LOCATION)] = Field(
        description="The flow to run: FILE.py::FUNCTION, FILE relative to the driver's root."
    )
    description: str | None = Field(default=None, description="What the action does, for operators.")
    timeout: int = Field(
        default=DEFAULT_ACTION_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_ACTION_TIMEOUT_SECONDS,
        description=(
            f"Seconds the action may run before Styrmin ends it; default {DEFAULT_ACTION_TIMEOUT_SECONDS}."
        ),
    )

    @property
    def file(self) -> str:
        """The action's Python file, relative to the driver's root."""
        return parse_location(self.location)[0]

    @property
    def function(self) -> str:
        """The name of the flow function in :attr:`file`."""
        return parse_location(self.location)[1]


class DriverBody(_SpecModel):
    """The ``spec`` section: the application, its chart, components and actions."""

    application: Application
    chart: ChartReference = Field(default_factory=ChartReference)
    components: list[Component] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)

    @model_validator(mode="after")
    def _follow_spec_rules(self) -> DriverBody:
        violations = spec_rule_violations(
            [c.model_dump() for c in self.components], [a.model_dump() for a in self.actions]
        )
        if violations:
            raise PydanticCustomError(
                "driver_rule",
                "{messages}",
                {"messages": " ".join(f"{v.field}: {v.message}" for v in violations)},
            )
        return self

    def component(self, name: str) -> Component:
        """The component called ``name``.

        Raises:
            KeyError: if the driver has no such component.
        """
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)

    def actions_of(self, hook: Hook, mode: Mode) -> list[Action]:
        """The actions that run at ``hook`` in ``mode``."""
        return [a for a in self.actions if a.hook is hook and a.mode is mode]


class DriverSpec(_SpecModel):
    """The whole ``driver.styrmin.yml``."""

    model_config = ConfigDict(
        title="Styrmin driver specification (driver.styrmin.yml)",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    api_version: Literal["styrmin.io/v1"] = Field(alias="apiVersion")
    kind: Literal["Driver"]
    metadata: DriverMetadata
    spec: DriverBody

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def version(self) -> str:
        return self.metadata.version


@dataclass(frozen=True)
class RuleViolation:
    """A broken rule between entries of a spec: where (``spec.actions[1].mode``) and what to do."""

    loc: tuple[str | int, ...]
    message: str

    @property
    def field(self) -> str:
        return format_loc(self.loc)


def spec_rule_violations(
    components: Sequence[Mapping[str, Any]], actions: Sequence[Mapping[str, Any]]
) -> list[RuleViolation]:
    """The rules across entries of ``spec.components`` and ``spec.actions``.

    Takes the entries as mappings, as written in the spec, so that the rules are checked even on
    entries that have other problems, and point at the right index.
    """
    violations: list[RuleViolation] = []
    violations += _duplicates("components", components, "component")
    violations += _duplicates("actions", actions, "action")
    for index, action in enumerate(actions):
        hook, mode = action.get("hook"), action.get("mode")
        if not isinstance(hook, str) or hook not in _HOOK_VALUES or mode != Mode.CORE.value:
            continue
        if not hook_has_driver_core(Hook(hook)):
            violations.append(
                RuleViolation(
                    ("spec", "actions", index, "mode"),
                    f"the {hook} hook has no core action: its core is Styrmin's own install of the "
                    "chart; use pre or post.",
                )
            )
    return violations


def _duplicates(section: str, entries: Sequence[Mapping[str, Any]], noun: str) -> list[RuleViolation]:
    first_index: dict[str, int] = {}
    violations = []
    for index, entry in enumerate(entries):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        if name in first_index:
            violations.append(
                RuleViolation(
                    ("spec", section, index, "name"),
                    f'{noun} name "{name}" is already used by spec.{section}[{first_index[name]}]; '
                    f"give each {noun} its own name.",
                )
            )
        else:
            first_index[name] = index
    return violations


def format_loc(loc: Sequence[str | int]) -> str:
    """``("spec", "actions", 1, "mode")`` as ``spec.actions[1].mode``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
