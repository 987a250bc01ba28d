"""The checks of the primitives' arguments, made before a primitive does anything.

A primitive given a wrong argument fails with an :class:`ActionError` naming the argument, what it
got and what to pass, before it calls the API or creates a Job: a Job started with a timeout that
only fails later would keep running, and the next change's action would find it still there.
Every backend (the agent's, the in-memory one of ``styrmin_backend.testing``) runs these same checks,
as they live in the primitives above the backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError


def _shown(value: Any) -> str:
    """``value`` as the error shows it: its repr, cut, and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = type(value).__name__
    return f"{text} ({'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind})"


def check_context(primitive: str, context: Any) -> GlobalContext:
    """``context``, which must be the GlobalContext Styrmin passed to the action."""
    if not isinstance(context, GlobalContext):
        raise ActionError(
            f"{primitive}(context=...) got {_shown(context)}; pass the context Styrmin gave the "
            "action: declare it as `context: GlobalContext` and pass context=context."
        )
    return context


def check_name(primitive: str, argument: str, value: Any, example: str) -> str:
    """A non-empty string argument (an image, a component, a version)."""
    if not isinstance(value, str) or not value.strip():
        got = "an empty string" if isinstance(value, str) else _shown(value)
        raise ActionError(f"{primitive}({argument}=...) got {got}; pass a non-empty string, e.g. {example}.")
    return value


def check_optional_name(primitive: str, argument: str, value: Any, example: str) -> str | None:
    """A non-empty string argument that may be None."""
    return None if value is None else check_name(primitive, argument, value, example)


def checked_command(primitive: str, command: Any) -> list[str]:
    """The Job's ``command``: a list of strings as it is, a string run with ``sh -c``."""
    example = "['shop', 'migrate'] or 'shop migrate'"
    if isinstance(command, str):
        if not command.strip():
            raise ActionError(
                f"{primitive}(command=...) got an empty string; give a command, e.g. {example}."
            )
        return ["sh", "-c", command]
    if not isinstance(command, Sequence) or isinstance(command, bytes | bytearray):
        raise ActionError(
            f"{primitive}(command=...) got {_shown(command)}; give a list of strings or a string, e.g. {example}."
        )
    if not command:
        raise ActionError(f"{primitive}(command=...) got an empty list; give a command, e.g. {example}.")
    for index, part in enumerate(command):
        if not isinstance(part, str):
            raise ActionError(
                f"{primitive}(command=...): part {index} is {_shown(part)}; every part of the command "
                f"is a string: write {str(part)!r}."
            )
    return list(command)


def checked_env(primitive: str, env: Any) -> dict[str, str]:
    """More env vars of the Job: a mapping of non-empty string names to string values, or None."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise ActionError(
            f"{primitive}(env=...) got {_shown(env)}; give a dict of names to values, e.g. {{'LOG_LEVEL': 'debug'}}."
        )
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name:
            raise ActionError(
                f"{primitive}(env=...): the name {_shown(name)} is not an env var name; "
                "give each name as a non-empty string without '=', e.g. 'LOG_LEVEL'."
            )
        if not isinstance(value, str):
            raise ActionError(
                f"{primitive}(env=...): {name} is {_shown(value)}; env values are strings: write {str(value)!r}."
            )
    return dict(env)


def checked_timeout(primitive: str, timeout: Any) -> float:
    """The seconds a command may run: a number of at least 1 (Kubernetes' smallest Job deadline)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ActionError(
            f"{primitive}(timeout=...) got {_shown(timeout)}; give the seconds as a number, e.g. timeout=600."
        )
    if not math.isfinite(timeout) or timeout < 1:
        raise ActionError(
            f"{primitive}(timeout=...) got {timeout!r}; give at least 1 second, e.g. timeout=600 "
            "(a Job's deadline is a whole number of seconds)."
        )
    return timeout


def checked_components(primitive: str, components: Any) -> list[str]:
    """Components to stop or start: one name, or a non-empty list of names."""
    if isinstance(components, str):
        components = [components]
    example = "['task-worker']"
    if not isinstance(components, Sequence) or isinstance(components, bytes | bytearray):
        raise ActionError(
            f"{primitive}(components=...) got {_shown(components)}; give a list of component names, e.g. {example}."
        )
    if not components:
        raise ActionError(
            f"{primitive}(components=...) got an empty list; give at least one component, e.g. {example}."
        )
    for name in components:
        check_name(primitive, "components", name, example)
    return list(components)


def checked_command_arguments(
    primitive: str,
    command: Any,
    image: Any,
    context: Any,
    env_from_component: Any,
    env: Any,
    timeout: Any,
) -> tuple[list[str], dict[str, str], float]:
    """The arguments of ``execute_commands`` (and ``execute_backup_commands``), checked in their order:
    the command's argv, the extra env and the timeout."""
    argv = checked_command(primitive, command)
    check_name(primitive, "image", image, "image=images[0]")
    check_context(primitive, context)
    check_optional_name(primitive, "env_from_component", env_from_component, "'server'")
    return argv, checked_env(primitive, env), checked_timeout(primitive, timeout)
