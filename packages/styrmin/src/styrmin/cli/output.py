"""Consoles and machine-readable output (``-o json|yaml``)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(StrEnum):
    """How a command prints what it read: for people (the default), or as JSON or YAML."""

    TEXT = "text"
    JSON = "json"
    YAML = "yaml"


class GetFormat(StrEnum):
    """How a get command prints the one object it read: for people, as ``KIND/NAME``, JSON or YAML."""

    TEXT = "text"
    NAME = "name"
    JSON = "json"
    YAML = "yaml"


class ListFormat(StrEnum):
    """How a list command prints: a table, a wider table, one KIND/NAME a line, JSON or YAML."""

    TEXT = "text"
    WIDE = "wide"
    NAME = "name"
    JSON = "json"
    YAML = "yaml"


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr). Rich honours NO_COLOR and FORCE_COLOR; when the output is not
    a terminal, lines are not wrapped at 80 columns (COLUMNS sets the width)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    width = None if is_tty or os.environ.get("COLUMNS") else 200
    return Console(file=stream, stderr=stderr, width=width, highlight=False, soft_wrap=False)


def plain(data: Any) -> Any:
    """``data`` (models, lists of models, dicts) as plain JSON-able values."""
    from pydantic import BaseModel

    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [plain(item) for item in data]
    return data


def dump(data: Any, fmt: OutputFormat | ListFormat | GetFormat) -> str:
    """``data`` as JSON (2-space indent) or YAML (fields in the API's order)."""
    value = plain(data)
    if fmt == OutputFormat.YAML:
        import yaml

        return str(yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False))
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def emit(data: Any, fmt: OutputFormat | ListFormat | GetFormat) -> None:
    """Write ``data`` to stdout as ``fmt`` (never through Rich, so no markup or wrapping applies)."""
    sys.stdout.write(dump(data, fmt))
    sys.stdout.flush()


def is_machine(fmt: OutputFormat | ListFormat | GetFormat | None) -> bool:
    """Whether ``fmt`` is JSON or YAML (the API's fields, for programs)."""
    return fmt is not None and fmt in (OutputFormat.JSON, OutputFormat.YAML)


def emit_names(kind: str, names: Sequence[str]) -> None:
    """``-o name``: one ``KIND/NAME`` a line, as kubectl prints (for ``xargs`` and loops)."""
    sys.stdout.write("".join(f"{kind}/{name}\n" for name in names))
    sys.stdout.flush()


def join(values: Sequence[str], empty: str = "-") -> str:
    return ", ".join(values) if values else empty
