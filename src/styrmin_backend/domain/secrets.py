"""What is secret in a deployment's configuration, and how a secret value is shown: set or unset.

One rule for the whole product: a value is secret when its key (a Helm value's key, an env var's
name) looks like it holds a secret, and the password of a URL with credentials is secret wherever it
stands. The API, the CLI, the pages, the logs and the actions' Prefect parameters all apply it.

A secret value is never shown: ``conceal`` replaces it with ``SECRET_SET``. A configuration sent
back with ``SECRET_SET`` (or a URL whose password is ``SECRET_SET``) where a secret was keeps the
stored secret (``keep_concealed``), so an operator can change other values without knowing it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

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


ENCRYPTED = "$styrmin-encrypted"
"""The key of the envelope that stands for a secret value stored encrypted: ``{ENCRYPTED: token}``."""


class Cipher(Protocol):
    """What encrypts a secret value for the database and decrypts it back (text to token, and back)."""

    def encrypt(self, plain: str) -> str: ...

    def decrypt(self, token: str) -> str: ...


def _is_secret_value(data: Any, key: str) -> bool:
    """Whether the one rule calls ``data`` (under ``key``) secret: it is concealed whole or in part."""
    return bool(conceal(data, key) != data)


def _is_envelope(data: Any) -> bool:
    return isinstance(data, dict) and set(data) == {ENCRYPTED} and isinstance(data[ENCRYPTED], str)


def _seal(data: Any, key: str, cipher: Cipher) -> Any:
    """``data`` with each secret value (as ``conceal`` finds them) replaced by its envelope."""
    if _is_envelope(data):
        return data  # sealed already
    if key and is_secret_name(key) and data not in (None, "", {}, []):
        return {ENCRYPTED: cipher.encrypt(json.dumps(data))}
    if isinstance(data, dict):
        return {k: _seal(v, str(k), cipher) for k, v in data.items()}
    if isinstance(data, list):
        return [_seal(item, key, cipher) for item in data]
    if isinstance(data, str) and _is_secret_value(data, key):
        # A string holding a URL's password: sealed whole, so no part of it is kept in plain text.
        return {ENCRYPTED: cipher.encrypt(json.dumps(data))}
    return data


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
    """A deployment's configuration as stored: each secret value (the rule of ``conceal_configuration``)
    replaced by ``{ENCRYPTED: token}``, every other value as it is."""
    sealed = dict(configuration)
    if isinstance(configuration.get("values"), dict):
        sealed["values"] = _seal(configuration["values"], "", cipher)
    if isinstance(configuration.get("env"), dict):
        sealed["env"] = {
            component: (
                {name: _seal(value, str(name), cipher) for name, value in variables.items()}
                if isinstance(variables, dict)
                else variables
            )
            for component, variables in configuration["env"].items()
        }
    return sealed


def decrypt_configuration(configuration: dict[str, Any], cipher: Cipher) -> dict[str, Any]:
    """A stored configuration with its secret values decrypted; values stored before encryption
    (plain) are read as they are."""
    return {
        key: _open(value, cipher) if key in ("values", "env") else value
        for key, value in configuration.items()
    }


def has_plain_secrets(configuration: dict[str, Any]) -> bool:
    """Whether a stored configuration still holds a secret value in plain text."""
    return encrypt_configuration(configuration, _Marking()) != configuration


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


class _Marking:
    """A cipher that only marks where a value would be encrypted."""

    def encrypt(self, plain: str) -> str:
        return ""

    def decrypt(self, token: str) -> str:
        return "null"
