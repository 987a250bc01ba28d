"""The difference between two renders of a deployment, object by object, with every secret concealed.

A preview compares what the deployment's last succeeded change applied with what a change would
apply. Each object (matched by kind, namespace and name) is added, changed, removed or unchanged, and
a changed one carries a unified diff of its YAML. Secret values never reach the diff: a Secret's
``data`` and ``stringData``, an env var whose name is secret, and whatever ``domain.secrets`` calls
secret are replaced, on both sides, by a marker saying only whether the value changed.
"""

from __future__ import annotations

import base64
import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from styrmin_backend.domain.secrets import SECRET_SET, conceal, is_secret_name

SECRET_UNCHANGED = "<secret: unchanged>"  # noqa: S105 - a marker, not a secret
"""A secret value that is the same before and after."""
SECRET_CHANGED = "<secret: changed>"  # noqa: S105 - a marker
"""A secret value that differs, on the side after the change; never the value."""
SECRET_EARLIER = "<secret: earlier value>"  # noqa: S105 - a marker
"""A secret value that differs, on the side before the change."""
SECRET_ADDED = SECRET_SET
"""A secret value that only one side has."""

DIFF_MAX_LINES = 2000
"""The most lines of a preview's diffs together; past them an object's diff says it was cut."""

Path = tuple[str | int, ...]


class ObjectChange(StrEnum):
    """What a change does to one rendered object."""

    ADDED = "added"
    CHANGED = "changed"
    REMOVED = "removed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ObjectDiff:
    """One rendered object: what happens to it, and the unified diff of its YAML when it changes."""

    kind: str
    name: str
    namespace: str | None
    change: ObjectChange
    diff: str
    diff_truncated: bool = False


def _key(manifest: Mapping[str, Any]) -> tuple[str, str, str]:
    metadata = manifest.get("metadata") or {}
    return (
        str(manifest.get("kind", "")),
        str(metadata.get("namespace") or ""),
        str(metadata.get("name", "")),
    )


def _segment(item: Any, index: int) -> str | int:
    """A list item's place in a path: its name when it has one (env vars, containers), else its index."""
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        return f"name={item['name']}"
    return index


def known_secrets(values: Iterable[str]) -> re.Pattern[str] | None:
    """A pattern of the secret values of the configurations rendered, and of their base64 forms (a
    chart may put a password into a config file, or ``b64enc`` it into a ConfigMap), longest first;
    None without any."""
    literals = {form for value in values for form in (value, base64.b64encode(value.encode()).decode())}
    if not literals:
        return None
    return re.compile("|".join(re.escape(literal) for literal in sorted(literals, key=len, reverse=True)))


def _secret_leaves(manifest: Mapping[str, Any], known: re.Pattern[str] | None) -> dict[Path, Any]:
    found: dict[Path, Any] = {}
    _mask(manifest, lambda path, value, partly: found.setdefault(path, value), known)
    return found


Mark = Callable[[Path, Any, bool], Any]
"""What replaces a secret leaf: ``mark(path, value, partly)``, ``partly`` for a text that is secret only
for the known secret values it holds (the rest of it may be shown)."""


def _mask(manifest: Mapping[str, Any], mark: Mark, known: re.Pattern[str] | None = None) -> dict[str, Any]:
    """A copy of ``manifest`` with each secret value replaced by ``mark``: by the rules of
    ``domain.secrets``, and each text holding one of the ``known`` secret values."""
    copy: dict[str, Any] = {}
    is_secret_object = manifest.get("kind") == "Secret"
    for key, value in manifest.items():
        if is_secret_object and key in ("data", "stringData") and isinstance(value, dict):
            copy[key] = {k: mark((key, str(k)), v, False) for k, v in value.items()}
        else:
            copy[key] = _mask_value(value, str(key), (str(key),), mark, known)
    return copy


def _mask_value(value: Any, key: str, path: Path, mark: Mark, known: re.Pattern[str] | None) -> Any:
    if key and is_secret_name(key) and value not in (None, "", {}, []):
        return mark(path, value, False)
    if isinstance(value, dict):
        env_name = value.get("name")
        masked: dict[str, Any] = {}
        for k, v in value.items():
            # An env var {"name": "DB_PASSWORD", "value": ...}: its value is secret by the var's name.
            if (
                k == "value"
                and isinstance(env_name, str)
                and is_secret_name(env_name)
                and v not in (None, "")
            ):
                masked[k] = mark((*path, "value"), v, False)
            else:
                masked[k] = _mask_value(v, str(k), (*path, str(k)), mark, known)
        return masked
    if isinstance(value, list):
        return [
            _mask_value(item, key, (*path, _segment(item, i)), mark, known) for i, item in enumerate(value)
        ]
    if isinstance(value, str):
        if conceal(value) != value:
            return mark(path, value, False)
        if known is not None and known.search(value):
            return mark(path, value, True)
    return value


def conceal_pair(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    known: re.Pattern[str] | None = None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``before`` and ``after`` (one object, either may be missing) with their secret values masked:
    ``SECRET_UNCHANGED`` on both sides where a value stayed, ``SECRET_EARLIER`` then ``SECRET_CHANGED``
    where it differs, ``SECRET_ADDED`` where only one side has it.

    A text that holds ``known`` secret values among other lines (a config file) keeps those lines:
    only the secret values in it are masked, changed where the other side holds other ones.
    """
    old = _secret_leaves(before, known) if before is not None else {}
    new = _secret_leaves(after, known) if after is not None else {}

    def marker(path: Path, value: Any, partly: bool, other: dict[Path, Any], changed: str) -> str:
        theirs = other.get(path)
        if path not in other:
            verdict = SECRET_ADDED
        elif partly and known is not None:
            same = isinstance(theirs, str) and known.findall(theirs) == known.findall(value)
            verdict = SECRET_UNCHANGED if same else changed
        else:
            verdict = SECRET_UNCHANGED if theirs == value else changed
        return known.sub(verdict, value) if partly and known is not None else verdict

    masked_before = (
        _mask(before, lambda p, v, partly: marker(p, v, partly, new, SECRET_EARLIER), known)
        if before is not None
        else None
    )
    masked_after = (
        _mask(after, lambda p, v, partly: marker(p, v, partly, old, SECRET_CHANGED), known)
        if after is not None
        else None
    )
    return masked_before, masked_after


def _yaml_lines(manifest: Mapping[str, Any] | None) -> list[str]:
    if manifest is None:
        return []
    return yaml.safe_dump(dict(manifest), sort_keys=True, default_flow_style=False).splitlines()


def diff_manifests(
    before: Iterable[Mapping[str, Any]],
    after: Iterable[Mapping[str, Any]],
    *,
    secrets: Iterable[str] = (),
    max_lines: int = DIFF_MAX_LINES,
) -> list[ObjectDiff]:
    """Each object of ``before`` and ``after`` with what happens to it, in ``after``'s order, then the
    removed ones in ``before``'s order. Diffs hold no secret value (``secrets``: those of the
    configurations rendered, wherever the chart put them); together they hold at most ``max_lines``
    lines."""
    known = known_secrets(secrets)
    old = {_key(m): m for m in before}
    new = {_key(m): m for m in after}
    keys = list(new) + [k for k in old if k not in new]
    budget = max_lines
    result: list[ObjectDiff] = []
    for key in keys:
        masked_old, masked_new = conceal_pair(old.get(key), new.get(key), known)
        if masked_old is None:
            change = ObjectChange.ADDED
        elif masked_new is None:
            change = ObjectChange.REMOVED
        elif old[key] == new[key]:
            change = ObjectChange.UNCHANGED
        else:
            change = ObjectChange.CHANGED
        lines: list[str] = []
        if change is not ObjectChange.UNCHANGED:
            kind, namespace, name = key
            label = f"{kind}/{name}"
            lines = list(
                difflib.unified_diff(
                    _yaml_lines(masked_old),
                    _yaml_lines(masked_new),
                    fromfile=f"a/{label}" if masked_old is not None else "/dev/null",
                    tofile=f"b/{label}" if masked_new is not None else "/dev/null",
                    lineterm="",
                )
            )
        truncated = len(lines) > budget
        kept = lines[: max(budget, 0)]
        budget -= len(kept)
        kind, namespace, name = key
        result.append(
            ObjectDiff(
                kind=kind,
                name=name,
                namespace=namespace or None,
                change=change,
                diff="\n".join(kept),
                diff_truncated=truncated,
            )
        )
    return result


def conceal_configuration_pair(
    before: Mapping[str, Any] | None, after: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Two configurations (values, images, env) with their secrets masked as in ``conceal_pair``:
    from and to, saying of each secret only whether it changed."""
    wrapped_before = _as_manifest(before) if before is not None else None
    masked_before, masked_after = conceal_pair(wrapped_before, _as_manifest(after))
    assert masked_after is not None
    return (
        _from_manifest(masked_before) if masked_before is not None else None,
        _from_manifest(masked_after),
    )


def _as_manifest(configuration: Mapping[str, Any]) -> dict[str, Any]:
    # Env vars as {"name": ..., "value": ...} entries, so that the env rule of manifests applies.
    env = configuration.get("env") or {}
    return {
        "values": configuration.get("values") or {},
        "images": configuration.get("images") or {},
        "env": {
            component: [{"name": name, "value": value} for name, value in (variables or {}).items()]
            for component, variables in env.items()
        },
    }


def _from_manifest(wrapped: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "values": wrapped["values"],
        "images": wrapped["images"],
        "env": {
            component: {entry["name"]: entry["value"] for entry in entries}
            for component, entries in wrapped["env"].items()
        },
    }
