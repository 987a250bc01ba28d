"""Secret configuration values stored encrypted: those already stored in plain text are encrypted with
the server's key (STYRMIN_SECRET_KEY, or the data dir's key of the embedded database).

The deployments' and backups' configurations and the configuration each change carries are rewritten;
the columns stay JSON. A database without secret values needs no key to migrate.

Revision ID: 0007_encrypt_secret_values
Revises: 0006_backup_locations
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

from styrmin_backend.domain.secrets import (
    Cipher,
    decrypt_configuration,
    encrypt_configuration,
    encrypted_tokens,
    has_plain_secrets,
)
from styrmin_backend.store.secret_box import HOW_TO_MAKE_A_KEY, SECRET_KEY_VARIABLE, secret_box_of

revision = "0007_encrypt_secret_values"
down_revision = "0006_backup_locations"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_COLUMNS = (("deployments", "configuration"), ("backups", "configuration"), ("changes", "spec"))


def upgrade() -> None:
    _rewrite(has_plain_secrets, encrypt_configuration)


def downgrade() -> None:
    _rewrite(lambda configuration: bool(encrypted_tokens(configuration)), decrypt_configuration)


def _rewrite(
    needs_rewrite: Callable[[dict[str, Any]], bool],
    rewrite: Callable[[dict[str, Any], Cipher], dict[str, Any]],
) -> None:
    connection = op.get_bind()
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:  # the rewritten values' old bytes are zeroed in the file, not left in free space
        connection.exec_driver_sql("PRAGMA secure_delete = ON")
    for table_name, column_name in _COLUMNS:
        table = sa.table(table_name, sa.column("id", _ID), sa.column(column_name, sa.JSON()))
        column = table.c[column_name]
        for row_id, stored in connection.execute(sa.select(table.c.id, column)).all():
            if not isinstance(stored, dict):
                continue
            in_spec = column_name == "spec"
            configuration = stored.get("configuration") if in_spec else stored
            if not isinstance(configuration, dict) or not needs_rewrite(configuration):
                continue
            rewritten = rewrite(configuration, _cipher(connection))
            value = {**stored, "configuration": rewritten} if in_spec else rewritten
            connection.execute(sa.update(table).where(table.c.id == row_id).values({column_name: value}))
    if sqlite:
        connection.exec_driver_sql("PRAGMA secure_delete = OFF")


def _cipher(connection: sa.Connection) -> Cipher:
    box = secret_box_of(connection.dialect)
    if box is None:
        raise RuntimeError(
            "The database holds secret configuration values in plain text and this migration encrypts "
            f"them, but no key was found: set {SECRET_KEY_VARIABLE} (with STYRMIN_DATABASE_URL), or run "
            f"`styrmin db upgrade` with the data dir of the embedded database ({HOW_TO_MAKE_A_KEY})."
        )
    return box
