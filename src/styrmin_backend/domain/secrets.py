"""What is secret in a deployment's configuration, and how a secret value is shown: set or unset.

One rule for the whole product: a value is secret when its key (a Helm value's key, an env var's
name) looks like it holds a secret, and the password of a URL with credentials is secret wherever it
stands. The API, the CLI, the pages, the logs and the actions' Prefect parameters all apply it.

A secret value is never shown: ``conceal`` replaces it with ``SECRET_SET``. A configuration sent
back with ``SECRET_SET`` (or a URL whose password is ``SECRET_SET``) where a secret was keeps the
stored secret (``keep_concealed``), so an operator can change other values without knowing it.
Concealing, sealing for the database (``encrypt_configuration``), ``has_plain_secrets`` and the
values to redact (``secret_values``) are uses of one walk, ``map_secret_values``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from styrmin_backend.domain.errors import InvalidInput

HIDDEN_VALUE_NAME_WORDS = (
    r"passw(?:or)?d|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?"
    r"|session[_-]?key|auth[_-]?key|dsn|connection[_-]?string"
)
"""The words that make a key or env var name secret (case-insensitive, anywhere in the name)."""

SECRET_SET = "<secret: set>"  # noqa: S105 - a marker, not a secret
"""How a secret value that is set is shown; an unset (empty) secret is shown empty."""

ENCRYPTED = "$styrmin-encrypted"
"""The key of the envelope that stands for a secret value stored encrypted: ``{ENCRYPTED: token}``."""

URL_PASSWORD = r"(?P<keep>://[^\s/:@'\"]{0,256}:)(?P<password>[^\s'\"]{1,1024})(?=@)"  # noqa: S105 - a pattern
"""The password of a URL with credentials, wherever it stands: after ``scheme://user:`` (the user may
be empty, as Redis' ``redis://:PASSWORD@host``) up to the URL's last ``@``, so a password holding
``/`` or ``@`` unencoded is caught whole. A path holding ``@`` after a port is taken for one too:
concealing too much is the safe side."""

_SECRET_NAME = re.compile(HIDDEN_VALUE_NAME_WORDS, re.IGNORECASE)
_URL_PASSWORD = re.compile(URL_PASSWORD)
_QUERY_SECRET = re.compile(
    rf"(?P<keep>[?&;][\w.-]{{0,40}}(?:{HIDDEN_VALUE_NAME_WORDS})[\w.-]{{0,40}}=)[^&;#\s'\"]{{1,1024}}",
    re.IGNORECASE,
)
"""A secret query parameter of a URL (``jdbc:postgresql://db/shop?user=shop&password=PASSWORD``)."""


def is_secret_name(name: str) -> bool:
    """Whether a Helm value's key or an env var's name says that its value is secret."""
    return bool(_SECRET_NAME.search(name))


def _is_envelope(data: Any) -> bool:
    return isinstance(data, dict) and set(data) == {ENCRYPTED} and isinstance(data[ENCRYPTED], str)


def sealed_part(values: Any, path: str = "values") -> str | None:
    """The path of the first mapping in ``values`` (a user's Helm values, depth already bounded)
    that uses the key Styrmin keeps for values it stored encrypted, else None.

    Taken as sent, such a mapping would be stored as a sealed secret that no key opens: every read of
    the deployment, and the agents' claims, would then fail.

    >>> sealed_part({"db": {"$styrmin-encrypted": "gAAAA"}})
    'values.db'
    """
    if isinstance(values, dict):
        if ENCRYPTED in values:
            return path
        for key, child in values.items():
            if (found := sealed_part(child, f"{path}.{key}")) is not None:
                return found
    elif isinstance(values, list):
        for index, child in enumerate(values):
            if (found := sealed_part(child, f"{path}.{index}")) is not None:
                return found
    return None


def map_secret_values(data: Any, replace: Callable[[Any, bool], Any], key: str = "") -> Any:
    """A copy of ``data`` (JSON-like, under ``key``) with each secret value ``v`` replaced by
    ``replace(v, whole)``: the one walk of the secret rule, which concealing and sealing both use.

    ``whole`` is True for a value under a secret key (a mapping or list under it too, unless it is
    empty), False for a string holding a URL's password or secret query parameter. Sealed values
    (envelopes) are left as they are.
    """
    if _is_envelope(data):
        return data
    if key and is_secret_name(key) and data not in (None, "", {}, []):
        return replace(data, True)
    if isinstance(data, dict):
        return {k: map_secret_values(v, replace, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [map_secret_values(item, replace, key) for item in data]
    if isinstance(data, str) and (_URL_PASSWORD.search(data) or _QUERY_SECRET.search(data)):
        return replace(data, False)
    return data


def map_secret_configuration(
    configuration: dict[str, Any], replace: Callable[[Any, bool], Any]
) -> dict[str, Any]:
    """A deployment's configuration (values, images, env) with ``map_secret_values`` applied to its
    Helm values and to each env var under its name; images hold no secret."""
    mapped = dict(configuration)
    if isinstance(configuration.get("values"), dict):
        mapped["values"] = map_secret_values(configuration["values"], replace)
    if isinstance(configuration.get("env"), dict):
        mapped["env"] = {
            component: (
                {name: map_secret_values(value, replace, str(name)) for name, value in variables.items()}
                if isinstance(variables, dict)
                else variables
            )
            for component, variables in configuration["env"].items()
        }
    return mapped


def _concealed(value: Any, whole: bool) -> Any:
    if whole:
        return SECRET_SET
    return _QUERY_SECRET.sub(rf"\g<keep>{SECRET_SET}", _URL_PASSWORD.sub(rf"\g<keep>{SECRET_SET}", value))


def conceal(data: Any, key: str = "") -> Any:
    """A copy of ``data`` (JSON-like) with each secret value replaced by ``SECRET_SET``.

    A value under a secret key is replaced whole, unless it is empty; a URL's password is replaced in
    any string.
    """
    return map_secret_values(data, _concealed, key)


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
    return map_secret_configuration(configuration, _concealed)


def _placeholder_at(data: Any, path: str) -> str | None:
    """The path of the first text in ``data`` that still holds ``SECRET_SET``, else None."""
    if isinstance(data, dict):
        return next(
            (p for k, v in data.items() if (p := _placeholder_at(v, f"{path}.{k}")) is not None), None
        )
    if isinstance(data, list):
        return next(
            (p for i, v in enumerate(data) if (p := _placeholder_at(v, f"{path}.{i}")) is not None), None
        )
    return path if isinstance(data, str) and SECRET_SET in data else None


def keep_concealed_configuration(sent: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """A configuration sent back after reading it concealed, with the secrets it kept as stored.

    Raises:
        InvalidInput: a value still reads ``SECRET_SET`` where no secret is stored to keep (a secret
            renamed, moved or added with the placeholder as its value): stored, the workload would
            get the placeholder's text in place of a secret.
    """
    kept = _kept_as_stored(sent, stored)
    found = _placeholder_at({k: kept.get(k) for k in ("values", "env")}, "configuration")
    if found is not None:
        raise InvalidInput(
            f'{found} reads "{SECRET_SET}", but no secret is stored under that name to keep (was it renamed '
            "or added?); type the secret's value there.",
            field=found,
        )
    return kept


def _kept_as_stored(sent: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
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

    def collect(value: Any, whole: bool) -> Any:
        _add_leaves(value, found)
        return value

    map_secret_values(data, collect)
    return {value for value in found if len(value) >= 4}


def _add_leaves(data: Any, found: set[str]) -> None:
    if isinstance(data, dict):
        for value in data.values():
            _add_leaves(value, found)
    elif isinstance(data, list):
        for value in data:
            _add_leaves(value, found)
    elif data not in (None, ""):
        found.add(str(data))


class Cipher(Protocol):
    """What encrypts a secret value for the database and decrypts it back (text to token, and back)."""

    def encrypt(self, plain: str) -> str: ...

    def decrypt(self, token: str) -> str: ...


def _open(data: Any, cipher: Cipher) -> Any:
    """``data`` with each envelope replaced by the value it seals; plain values stay as they are."""
    if isinstance(data, dict):
        if _is_envelope(data):
            return json.loads(cipher.decrypt(data[ENCRYPTED]))
        return {k: _open(v, cipher) for k, v in data.items()}
    if isinstance(data, list):
        return [_open(item, cipher) for item in data]
    return data


def encrypt_configuration(configuration: dict[str, Any], cipher: Cipher) -> dict[str, Any]:
    """A deployment's configuration as stored: each secret value replaced by ``{ENCRYPTED: token}``
    (a string holding a URL's password sealed whole), every other value as it is."""

    def seal(value: Any, whole: bool) -> dict[str, str]:
        return {ENCRYPTED: cipher.encrypt(json.dumps(value))}

    return map_secret_configuration(configuration, seal)


def decrypt_configuration(configuration: dict[str, Any], cipher: Cipher) -> dict[str, Any]:
    """A stored configuration with its secret values decrypted; values stored before encryption
    (plain) are read as they are."""
    return {
        key: _open(value, cipher) if key in ("values", "env") else value
        for key, value in configuration.items()
    }


def has_plain_secrets(configuration: dict[str, Any]) -> bool:
    """Whether a stored configuration still holds a secret value in plain text."""
    found: list[Any] = []
    map_secret_configuration(configuration, lambda value, whole: found.append(value))
    return bool(found)


def encrypted_tokens(configuration: dict[str, Any]) -> list[str]:
    """The tokens of the encrypted values of a stored configuration (to check that a key reads them)."""
    found: list[str] = []

    def walk(data: Any) -> None:
        if isinstance(data, dict):
            if _is_envelope(data):
                found.append(data[ENCRYPTED])
                return
            for value in data.values():
                walk(value)
        elif isinstance(data, list):
            for value in data:
                walk(value)

    walk({key: configuration.get(key) for key in ("values", "env")})
    return found
