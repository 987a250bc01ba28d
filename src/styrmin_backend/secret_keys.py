"""Where the server's secret keys come from: STYRMIN_SECRET_KEY, or a key generated into the data dir.

The embedded default (SQLite in the data dir, as ``styrmin up`` runs it) keeps its key beside its
database. A server on another database (PostgreSQL, several replicas) must be given the key: a key
of its own data dir would differ between replicas and be lost with the pod.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import Engine

from styrmin_backend.data_dir import FILE_MODE
from styrmin_backend.settings import Settings
from styrmin_backend.store.secret_box import (
    HOW_TO_MAKE_A_KEY,
    SECRET_KEY_VARIABLE,
    SecretBox,
    SecretKeyProblem,
    use_secret_keys,
)

KEY_FILE = "secret-key.txt"  # matches the data dir's private files (*.txt): mode 0600


def secret_keys(settings: Settings) -> list[str]:
    """The keys in force, newest first.

    Raises:
        SecretKeyProblem: when STYRMIN_SECRET_KEY is not set and the database is not the data dir's.
    """
    if settings.secret_key is not None:
        return [key.strip() for key in settings.secret_key.get_secret_value().split(",") if key.strip()]
    key_file = settings.data_dir / KEY_FILE
    if key_file.is_file():
        return [key.strip() for key in key_file.read_text().split(",") if key.strip()]
    if settings.database_url:
        raise SecretKeyProblem(
            f"STYRMIN_DATABASE_URL is set but {SECRET_KEY_VARIABLE} is not: every server of that database "
            f"needs the same key to encrypt and read secret configuration values. Set {SECRET_KEY_VARIABLE} "
            f"(keep it in a secret store; {HOW_TO_MAKE_A_KEY})."
        )
    return [_generate_key_file(key_file)]


def secret_box(settings: Settings) -> SecretBox:
    """The keys in force as a ``SecretBox`` (raises SecretKeyProblem, saying what to do)."""
    return SecretBox(secret_keys(settings))


def use_settings_keys(engine: Engine, settings: Settings) -> None:
    """Give ``engine`` the keys in force, to encrypt and decrypt secret values."""
    use_secret_keys(engine, secret_box(settings))


def _generate_key_file(key_file: Path) -> str:
    key = Fernet.generate_key().decode()
    key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # O_EXCL: of two processes starting at once, one writes the key and the other reads it.
    try:
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return key_file.read_text().strip()
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key
