"""Label and field selectors, in query strings and in object specs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import bad_request

Requirement = Callable[[dict[str, str]], bool]

_SET_RE = re.compile(r"^\s*(!)?\s*([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_OP_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> Requirement:
    """A predicate on labels for a selector such as `app=web,tier in (a,b),!legacy`."""
    if not text:
        return lambda labels: True
    requirements: list[Requirement] = []
    for part in _split_top_level(text):
        op_match = _OP_RE.match(part)
        if op_match:
            key, op, value = op_match.groups()
            requirements.append(_equals(key, value, op != "!="))
            continue
        set_match = _SET_RE.match(part)
        if not set_match:
            raise bad_request(
                f'unable to parse requirement: found "{part.strip()}", expected a label selector'
            )
        negated, key, op, values_text = set_match.groups()
        if op:
            if negated:
                raise bad_request(f'unable to parse requirement: "{part.strip()}"')
            values = {v.strip() for v in values_text.split(",") if v.strip()}
            requirements.append(_one_of(key, values, op == "in"))
        else:
            requirements.append(_exists(key, not negated))
    return lambda labels: all(req(labels) for req in requirements)


def _equals(key: str, value: str, wanted: bool) -> Requirement:
    return lambda labels: (labels.get(key) == value) == wanted


def _one_of(key: str, values: set[str], wanted: bool) -> Requirement:
    return lambda labels: (labels.get(key) in values) == wanted


def _exists(key: str, wanted: bool) -> Requirement:
    return lambda labels: (key in labels) == wanted


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a spec selector (matchLabels and matchExpressions) selects these labels.

    An empty or missing selector selects nothing, as controllers treat it.
    """
    if not selector:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def selector_to_string(selector: dict[str, Any] | None) -> str:
    """The query-string form of a spec selector, as the Scale subresource reports it."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = ",".join(expression.get("values") or [])
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }.get(operator, key)
        )
    return ",".join(parts)


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string value of a dotted field path such as `status.phase`; '' when absent."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate on objects for a selector such as `metadata.name=web,status.phase!=Running`."""
    if not text:
        return lambda obj: True
    checks: list[tuple[str, bool, str]] = []
    for part in _split_unescaped(text, ","):
        if not part.strip():
            continue
        if "!=" in part:
            key, value = part.split("!=", 1)
            checks.append((key.strip(), False, value.strip()))
        elif "==" in part:
            key, value = part.split("==", 1)
            checks.append((key.strip(), True, value.strip()))
        elif "=" in part:
            key, value = part.split("=", 1)
            checks.append((key.strip(), True, value.strip()))
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")

    def matches(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, key) == value) == equal for key, equal, value in checks)

    return matches
