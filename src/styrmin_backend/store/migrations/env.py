"""Alembic environment: runs the migrations on the connection Styrmin hands it."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from styrmin_backend.store.models import Base

connection: Connection | None = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("Run Styrmin's migrations with `styrmin db upgrade`, not the alembic command.")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
