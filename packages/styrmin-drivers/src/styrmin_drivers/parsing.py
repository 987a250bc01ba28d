"""Reading ``driver.styrmin.yml`` text into a :class:`DriverSpec`, with problems that name lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from styrmin_drivers._yaml_source import YamlSource, YamlSyntaxError
from styrmin_drivers.limits import SPEC_MAX_BYTES
from styrmin_drivers.report import DriverError, DriverProblem
from styrmin_drivers.spec import (
    SPEC_FILE_NAME,
    Action,
    Application,
    ChartReference,
    Component,
    DriverSpec,
    format_loc,
    spec_rule_violations,
)

_NOUNS = {
    "hook": "hook",
    "mode": "mode",
    "kind": "kind",
    "apiVersion": "supported apiVersion",
}

_TYPE_WORDS = {
    "string_type": "text",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "list_type": "a list",
    "model_type": "a mapping of fields",
    "model_attributes_type": "a mapping of fields",
    "dict_type": "a mapping",
    "bool_type": "true or false",
}


@dataclass
class ParsedSpec:
    """A spec as far as it could be read: the model when valid, and the entries valid on their own.

    Validation goes on with the valid entries (components, actions, chart), so that one broken entry
    does not hide the problems of the others.
    """

    file: str
    source: YamlSource | None = None
    spec: DriverSpec | None = None
    problems: list[DriverProblem] = field(default_factory=list)
    components: list[tuple[int, Component]] = field(default_factory=list)
    actions: list[tuple[int, Action]] = field(default_factory=list)
    chart: ChartReference | None = None
    application: Application | None = None

    def line_of(self, loc: tuple[str | int, ...]) -> int | None:
        return self.source.line_of(loc) if self.source else None

    def problem(self, loc: tuple[str | int, ...], message: str, *, key: bool = False) -> DriverProblem:
        line = self.source.line_of(loc, key=key) if self.source else None
        return DriverProblem(file=self.file, line=line, field=format_loc(loc) or None, message=message)


def parse_driver_spec(text: str, *, file: str = SPEC_FILE_NAME) -> ParsedSpec:
    """Read a spec's text, collecting every problem of its shape and of the rules across entries."""
    parsed = ParsedSpec(file=file)
    if len(text) > SPEC_MAX_BYTES:
        parsed.problems.append(
            DriverProblem(
                file=file,
                message=f"the spec is larger than {SPEC_MAX_BYTES // 1024} KiB; "
                "it only declares the driver: move data into the chart or the actions' files.",
            )
        )
        return parsed
    try:
        source = YamlSource.parse(text)
    except YamlSyntaxError as error:
        message = f"not valid YAML: {error}; {error.hint}." if error.hint else f"{error}."
        parsed.problems.append(DriverProblem(file=file, line=error.line, message=message))
        return parsed
    parsed.source = source
    for duplicate in source.duplicate_keys:
        parsed.problems.append(
            DriverProblem(
                file=file,
                line=duplicate.line,
                field=format_loc(duplicate.loc),
                message="this key appears twice in the same mapping; keep one.",
            )
        )
    if not isinstance(source.data, dict):
        parsed.problems.append(
            DriverProblem(
                file=file,
                line=source.line_of(()),
                message="the spec must be a YAML mapping with apiVersion, kind, metadata and spec; "
                f"see docs/drivers.md for an example {SPEC_FILE_NAME}.",
            )
        )
        return parsed

    try:
        parsed.spec = DriverSpec.model_validate(source.data)
    except ValidationError as error:
        for detail in error.errors():
            if detail["type"] == "driver_rule":
                continue  # reported below, entry by entry, with the field of each violation
            parsed.problems.append(_problem_from_error(parsed, detail))

    _read_valid_entries(parsed, source.data)
    body = source.data.get("spec")
    if isinstance(body, dict):
        for violation in spec_rule_violations(_mappings(body, "components"), _mappings(body, "actions")):
            parsed.problems.append(parsed.problem(violation.loc, violation.message))
    parsed.problems.sort(key=lambda p: p.line or 0)
    return parsed


def load_driver_spec(text: str, *, file: str = SPEC_FILE_NAME) -> DriverSpec:
    """The spec in ``text``.

    Raises:
        DriverError: with every problem of the spec, when it is not valid.
    """
    parsed = parse_driver_spec(text, file=file)
    if parsed.problems or parsed.spec is None:
        raise DriverError(parsed.problems)
    return parsed.spec


def _read_valid_entries(parsed: ParsedSpec, data: dict[str, Any]) -> None:
    body = data.get("spec")
    if not isinstance(body, dict):
        return
    parsed.application = _valid_or_none(Application, body.get("application"))
    parsed.chart = _valid_or_none(ChartReference, body.get("chart", {}))
    for section, model, entries in (
        ("components", Component, parsed.components),
        ("actions", Action, parsed.actions),
    ):
        items = body.get(section)
        if isinstance(items, list):
            for index, item in enumerate(items):
                entry = _valid_or_none(model, item)
                if entry is not None:
                    entries.append((index, entry))  # type: ignore[arg-type]


def _mappings(body: dict[str, Any], section: str) -> list[dict[str, Any]]:
    items = body.get(section)
    if not isinstance(items, list):
        return []
    return [item if isinstance(item, dict) else {} for item in items]


def _valid_or_none(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def _problem_from_error(parsed: ParsedSpec, detail: ErrorDetails) -> DriverProblem:
    loc = tuple(detail["loc"])
    kind = detail["type"]
    value = detail.get("input")
    last = str(loc[-1]) if loc else ""
    if kind in ("enum", "literal_error"):
        expected = str(detail.get("ctx", {}).get("expected", "")).replace("'", "")
        noun = _NOUNS.get(last, last or "value")
        article = "an" if noun[0] in "aeiou" else "a"
        message = f"{_show(value)} is not {article} {noun}; use {expected}."
        if noun == "hook" and value == "core":
            message += " (core is a mode.)"
        return parsed.problem(loc, message)
    if kind == "missing":
        info = _field_info(loc)
        hint = ""
        if info and info.description:
            hint = f" ({info.description[0].lower()}{info.description[1:].rstrip('.')})"
        return parsed.problem(loc, f"required field is missing; add it{hint}.")
    if kind == "extra_forbidden":
        known = _known_fields(loc[:-1])
        listing = f" (fields here: {', '.join(known)})" if known else ""
        return parsed.problem(loc, f"unknown field; remove it or fix its spelling{listing}.", key=True)
    if kind in _TYPE_WORDS:
        return parsed.problem(
            loc, f"expected {_TYPE_WORDS[kind]}, got {_show(value)}; write {_TYPE_WORDS[kind]}."
        )
    context = detail.get("ctx", {})
    if kind == "greater_than":
        return parsed.problem(loc, f"{_show(value)} is too small; use a number greater than {context['gt']}.")
    if kind == "less_than_equal":
        return parsed.problem(loc, f"{_show(value)} is too large; use at most {context['le']}.")
    if kind == "string_too_short":
        return parsed.problem(loc, "is empty; write a value.")
    # Our own validators already say what to do.
    message = detail["msg"]
    return parsed.problem(loc, message if message.endswith(".") else f"{message}.")


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The spec model that holds the fields at ``loc`` (list indexes skipped)."""
    model: type[BaseModel] = DriverSpec
    for part in loc:
        if isinstance(part, int):
            continue
        info = _fields_by_alias(model).get(part)
        if info is None:
            return None
        inner = _model_of(info)
        if inner is None:
            return None
        model = inner
    return model


def _field_info(loc: tuple[str | int, ...]) -> FieldInfo | None:
    model = _model_at(loc[:-1])
    return _fields_by_alias(model).get(str(loc[-1])) if model and loc else None


def _known_fields(loc: tuple[str | int, ...]) -> list[str]:
    model = _model_at(loc)
    return list(_fields_by_alias(model)) if model else []


def _fields_by_alias(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {info.alias or name: info for name, info in model.model_fields.items()}


def _model_of(info: FieldInfo) -> type[BaseModel] | None:
    annotation = info.annotation
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
