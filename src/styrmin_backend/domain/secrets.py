"""What is secret in a deployment's configuration, and how a secret value is shown: set or unset.

One rule for the whole product: a value is secret when its key (a Helm value's key, an env var's
name) looks like it holds a secret, and the password of a URL with credentials is secret wherever it
stands. The API, the CLI, the pages, the logs and the actions' Prefect parameters all apply it.

A secret value is never shown: ``conceal`` replaces it with ``SECRET_SET``. A configuration sent
back with ``SECRET_SET`` (or a URL whose password is ``SECRET_SET``) where a secret was keeps the
stored secret (``keep_concealed``), so an operator can change other values without knowing it.
"""

from __future__ import annotations

import re
from typing import Any

HIDDEN_VALUE_NAME_WORDS = (
    r"passw(?:or)?d|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?"
    r"|session[_-]?key|auth[_-]?key|dsn|connection[_-]?string"
)
"""The words that make a key or env var name secret (case-insensitive, anywhere in the name)."""

SECRET_SET = "<secret: set>"  # noqa: S105 - a marker, not a secret
"""How a secret value that is set is shown; an unset (empty) secret is shown empty."""

_SECRET_NAME = re.compile(HIDDEN_VALUE_NAME_WORDS, re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(?P<keep>://[^\s/:@'\"]{1,256}:)[^\s/@'\"]{1,1024}(?=@)")


def is_secret_name(name: str) -> bool:
    """Whether a Helm value's key or an env var's name says that its value is secret."""
    return bool(_SECRET_NAME.search(name))


def conceal(data: Any, key: str = "") -> Any:
    """A copy of ``data`` (JSON-like) with each secret value replaced by ``SECRET_SET``.

    A value under a secret key is replaced whole (a mapping or list under it too), unless it is
    empty; a URL's password is replaced in any string.
    """
    if key and is_secret_name(key) and data not in (None, "", {}, []):
        return SECRET_SET
    if isinstance(data, dict):
        return {k: conceal(v, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [conceal(item, key) for item in data]
    if isinstance(data, str):
        return _URL_PASSWORD.sub(rf"\g<keep>{SECRET_SET}", data)
    return data


def keep_concealed(sent: Any, stored: Any, key: str = "") -> Any:
    """``sent`` with every value that is the concealed form of the ``stored`` one put back as stored.

    For a configuration read (concealed) and sent back: the secrets it did not change stay.
    """
    if isinstance(sent, dict) and isinstance(stored, dict):
        return {k: keep_concealed(v, stored.get(k), str(k)) for k, v in sent.items()}
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        return [keep_concealed(s, t, key) for s, t in zip(sent, stored, strict=True)]
    if stored is not None and sent != stored and sent == conceal(stored, key):
        return stored
    return sent


def conceal_configuration(configuration: dict[str, Any]) -> dict[str, Any]:
    """A deployment's stored configuration (values, images, env) as every reader sees it."""
    concealed = dict(configuration)
    if "values" in configuration:
        concealed["values"] = conceal(configuration["values"])
    if "env" in configuration:
        concealed["env"] = {
            component: {name: conceal(value, name) for name, value in (variables or {}).items()}
            for component, variables in (configuration["env"] or {}).items()
        }
    return concealed


def keep_concealed_configuration(sent: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """A configuration sent back after reading it concealed, with the secrets it kept as stored."""
    kept = dict(sent)
    kept["values"] = keep_concealed(sent.get("values", {}), stored.get("values", {}))
    stored_env = stored.get("env") or {}
    kept["env"] = {
        component: {
            name: keep_concealed(value, (stored_env.get(component) or {}).get(name), name)
            for name, value in variables.items()
        }
        for component, variables in (sent.get("env") or {}).items()
    }
    return kept


def secret_values(data: Any) -> set[str]:
    """The secret values in ``data`` (a configuration, an action's parameters), to redact from text."""
    found: set[str] = set()

    def walk(sent: Any, concealed: Any) -> None:
        if isinstance(sent, dict) and isinstance(concealed, dict):
            for k, v in sent.items():
                walk(v, concealed.get(k))
        elif isinstance(sent, list) and isinstance(concealed, list):
            for s, c in zip(sent, concealed, strict=False):
                walk(s, c)
        elif sent != concealed:
            if isinstance(sent, str):
                found.add(sent)
            elif sent is not None and not isinstance(sent, (dict, list)):
                found.add(str(sent))
            else:
                walk_all(sent)

    def walk_all(data: Any) -> None:
        if isinstance(data, dict):
            for v in data.values():
                walk_all(v)
        elif isinstance(data, list):
            for v in data:
                walk_all(v)
        elif data not in (None, ""):
            found.add(str(data))

    walk(data, conceal(data))
    return {value for value in found if len(value) >= 4}
