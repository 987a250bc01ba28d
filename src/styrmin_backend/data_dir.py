"""The data dir holds the database, the first admin password and the logs: only its owner reads it."""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
_PRIVATE_FILES = ("*.db", "*.db-wal", "*.db-shm", "*.log", "*.txt")
"""The databases (Styrmin's, Prefect's), logs and password file, in the data dir and one level down."""


def restrict_new_files() -> None:
    """Make the files and folders this process creates from now on private to its user (umask 077).

    For ``styrmin up`` and ``styrmin server``: SQLite's WAL files and the Prefect server's log appear
    after start-up, so setting their modes once is not enough.
    """
    os.umask(0o077)


def make_data_dir_private(data_dir: Path) -> None:
    """Create ``data_dir`` with mode 0700 (or set it) and set its databases, logs and password file to 0600."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    data_dir.chmod(DIR_MODE)
    for pattern in _PRIVATE_FILES:
        for path in (*data_dir.glob(pattern), *data_dir.glob(f"*/{pattern}")):
            if path.is_file() and not path.is_symlink():
                path.chmod(FILE_MODE)
