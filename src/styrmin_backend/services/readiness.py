"""Whether the server can serve: its database answers, with the schema at the newest migration."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from styrmin_backend.store.migrate import database_is_current


def database_not_ready(engine: Engine) -> str | None:
    """Why the database cannot serve requests now, as an operator reads it; None when it can."""
    try:
        current = database_is_current(engine)
    except SQLAlchemyError as error:
        return f"The database cannot be reached: {type(error).__name__}."
    if not current:
        return "The database schema is not at the newest migration; run `styrmin db upgrade`."
    return None
