"""How Styrmin slows down password guessing: failed logins back off, per user and address, and per address.

After a few free failures, each further failure blocks the next attempt for twice as long as the
previous one, up to ``MAX_BLOCK``: guessing gets slow, yet a user is never locked out for longer
than a few minutes, whatever an attacker does. Failures count per (user name, client address), so
an attacker elsewhere cannot block a user's own logins, and per client address (with more free
failures), so one address cannot try many user names. A successful login clears its (user name,
address) count; a count not added to for ``FORGET_AFTER`` starts again from zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

FREE_FAILURES_PER_USER = 5
"""Failed logins of one user name from one address answered without delay."""
FREE_FAILURES_PER_ADDRESS = 20
"""Failed logins from one address, whatever the user name, answered without delay."""
FIRST_BLOCK = timedelta(seconds=1)
MAX_BLOCK = timedelta(minutes=5)
FORGET_AFTER = timedelta(minutes=15)


@dataclass(frozen=True)
class FailureCount:
    """The failed logins counted under one key, and until when the key is blocked."""

    failures: int
    last_failed_at: datetime
    blocked_until: datetime | None


def user_key(username: str, address: str) -> str:
    """The key counting failures of ``username`` from ``address``."""
    return f"user:{username.lower()}@{address}"


def address_key(address: str) -> str:
    """The key counting failures from ``address``."""
    return f"address:{address}"


def free_failures(key: str) -> int:
    """How many failures of ``key`` are answered without delay."""
    return FREE_FAILURES_PER_ADDRESS if key.startswith("address:") else FREE_FAILURES_PER_USER


def block_for(failures: int, free: int) -> timedelta | None:
    """How long to refuse logins after the ``failures``-th failure in a row; None while still free."""
    if failures <= free:
        return None
    doublings = min(failures - free - 1, 30)
    block: timedelta = FIRST_BLOCK * (2**doublings)
    return min(block, MAX_BLOCK)


def after_failure(count: FailureCount | None, key: str, now: datetime) -> FailureCount:
    """The count of ``key`` after one more failed login at ``now``."""
    failures = 1 if count is None or now - count.last_failed_at > FORGET_AFTER else count.failures + 1
    block = block_for(failures, free_failures(key))
    return FailureCount(failures, now, now + block if block else None)


def retry_after(count: FailureCount | None, now: datetime) -> int | None:
    """Whole seconds until ``count``'s key may try again; None when it may now."""
    if count is None or count.blocked_until is None or count.blocked_until <= now:
        return None
    return max(1, math.ceil((count.blocked_until - now).total_seconds()))
