"""The keys that encrypt secret configuration values in the database, and the columns that use them.

Each engine carries its own keys (``use_secret_keys``): a server's, a migration's, a test's. The
configuration columns seal secret values on write and open them on read (``domain.secrets``), so
services and interfaces see plain values while the database holds only Fernet tokens.
"""

from __future__ import annotations

import weakref
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import JSON, Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from styrmin_backend.domain.errors import SecretKeyWrong
from styrmin_backend.domain.secrets import decrypt_configuration, encrypt_configuration

SECRET_KEY_VARIABLE = "STYRMIN_SECRET_KEY"  # noqa: S105 - the variable's name
HOW_TO_MAKE_A_KEY = (
    "make one with: python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
)


class SecretKeyProblem(RuntimeError):
    """The server's secret keys are missing or are not keys; the message says what to do."""


class SecretBox:
    """Fernet keys: the first encrypts, every one decrypts (put a new key first to rotate)."""

    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise SecretKeyProblem(f"{SECRET_KEY_VARIABLE} holds no key; {HOW_TO_MAKE_A_KEY}")
        fernets = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.strip().encode()))
            except ValueError:
                raise SecretKeyProblem(
                    f"Key {position} of {SECRET_KEY_VARIABLE} is not a Fernet key (32 url-safe base64 "
                    f"bytes); {HOW_TO_MAKE_A_KEY}"
                ) from None
        self._fernet = MultiFernet(fernets)

    def encrypt(self, plain: str) -> str:
        return self._fernet.encrypt(plain.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            raise SecretKeyWrong(
                "A secret value in the database was encrypted with a key that is not in "
                f"{SECRET_KEY_VARIABLE}. Set {SECRET_KEY_VARIABLE} to the key it was written with "
                "(after a rotation: the new key first, then the old ones, comma-separated)."
            ) from None


_boxes: weakref.WeakKeyDictionary[Dialect, SecretBox] = weakref.WeakKeyDictionary()


def use_secret_keys(engine: Engine, box: SecretBox) -> None:
    """Encrypt and decrypt the secret values that go through ``engine`` with ``box``'s keys."""
    _boxes[engine.dialect] = box


def secret_box_of(dialect: Dialect) -> SecretBox | None:
    """The keys of the engine whose dialect is ``dialect``; None when it was given none."""
    return _boxes.get(dialect)


class _KeysOf:
    """The keys of ``dialect``'s engine, looked up only when a secret value is met: a configuration
    without secrets is stored and read on an engine given no keys."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect

    def _box(self) -> SecretBox:
        box = _boxes.get(self._dialect)
        if box is None:
            raise SecretKeyWrong(
                f"This database connection has no secret key to encrypt or decrypt secret values; set "
                f"{SECRET_KEY_VARIABLE} ({HOW_TO_MAKE_A_KEY})."
            )
        return box

    def encrypt(self, plain: str) -> str:
        return self._box().encrypt(plain)

    def decrypt(self, token: str) -> str:
        return self._box().decrypt(token)


class EncryptedConfiguration(TypeDecorator[dict[str, Any]]):
    """A deployment's configuration (JSON) whose secret values are stored encrypted."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: Dialect) -> dict[str, Any] | None:
        return encrypt_configuration(value, _KeysOf(dialect)) if value is not None else None

    def process_result_value(self, value: Any, dialect: Dialect) -> dict[str, Any] | None:
        return decrypt_configuration(value, _KeysOf(dialect)) if value is not None else None


class EncryptedChangeSpec(TypeDecorator[dict[str, Any]]):
    """A change's spec (JSON); the configuration it carries has its secret values stored encrypted."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: Dialect) -> dict[str, Any] | None:
        if value is None or not isinstance(value.get("configuration"), dict):
            return value
        return {**value, "configuration": encrypt_configuration(value["configuration"], _KeysOf(dialect))}

    def process_result_value(self, value: Any, dialect: Dialect) -> dict[str, Any] | None:
        if value is None or not isinstance(value.get("configuration"), dict):
            return value  # type: ignore[no-any-return]
        return {**value, "configuration": decrypt_configuration(value["configuration"], _KeysOf(dialect))}


def check_secret_keys(engine: Engine) -> None:
    """Raise SecretKeyWrong at start when ``engine``'s keys do not read the secret values stored already."""
    from sqlalchemy import select

    from styrmin_backend.store.models import BackupRow, ChangeRow, DeploymentRow

    with engine.connect() as connection:
        # Each table's newest rows: written with the newest key in use, so they tell a wrong key at once.
        for column, row_id in (
            (DeploymentRow.configuration, DeploymentRow.id),
            (BackupRow.configuration, BackupRow.id),
            (ChangeRow.spec, ChangeRow.id),
        ):
            connection.execute(select(column).order_by(row_id.desc()).limit(20)).all()


def reencrypt_secret_values(engine: Engine) -> int:
    """Write every stored secret value again with the first of ``engine``'s keys; returns the rows written.

    After a rotation (new key first), this lets the old keys be removed from STYRMIN_SECRET_KEY.
    """
    from sqlalchemy.orm import Session
    from sqlalchemy.orm.attributes import flag_modified

    from styrmin_backend.store.models import BackupRow, ChangeRow, DeploymentRow

    written = 0
    with Session(engine) as session, session.begin():
        for model, attribute in (
            (DeploymentRow, "configuration"),
            (BackupRow, "configuration"),
            (ChangeRow, "spec"),
        ):
            for row in session.query(model).yield_per(200):
                flag_modified(row, attribute)
                written += 1
    return written
