"""What the server answers when its database cannot serve a request: 503, never a bug's 500."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from styrmin_backend.domain.outages import when
from styrmin_backend.store.db import database_unavailable, outages_of

RETRY_AFTER_SECONDS = 2
"""What ``Retry-After`` says: a database back from a restart serves again within a second or two."""


@dataclass(frozen=True)
class DatabaseOutageNotice:
    """The answer to a request the database could not serve."""

    message: str
    outage_began: bool
    """Whether this request is the first the outage failed (the server logs that one)."""
    retry_after: int = RETRY_AFTER_SECONDS


def database_outage_notice(engine: Engine, error: BaseException) -> DatabaseOutageNotice | None:
    """The notice for ``error`` when it says the database is unavailable (recording the outage), else None."""
    if not database_unavailable(error):
        return None
    outages = outages_of(engine)
    began = outages.record_failure()
    outage = outages.last()
    since = f" since {when(outage.since)}" if outage is not None else ""
    return DatabaseOutageNotice(
        f"Styrmin's database cannot be reached{since} ({type(error).__name__}); nothing was changed. "
        f"Try again in a few seconds; if it lasts, check the database (see /readyz).",
        began,
    )
