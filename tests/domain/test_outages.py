"""The lease rules around outages, and the backoff of calls that wait one out."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from styrmin_backend.domain.outages import (
    DATABASE,
    LEASE_GRACE_AFTER_OUTAGE,
    Outage,
    agent_gone_error,
    ended_because_agent_stopped,
    instance_went_away,
    lease_expiry_error,
    lease_ran_out,
    retry_delay,
)

T0 = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
OUTAGE = Outage(DATABASE, since=T0, until=T0 + timedelta(seconds=41))


def test_an_instance_went_away_only_when_the_connection_that_closed_was_its_last() -> None:
    assert instance_went_away(3, 3)
    assert not instance_went_away(3, 4)  # it connected again, on this server or another
    assert not instance_went_away(3, None)  # forgotten or never known: the leases decide


def test_the_error_of_a_task_whose_agent_went_away_names_the_process_and_tells_the_lease_rules() -> None:
    error = agent_gone_error("styrmin-agent:0123456789ab", T0, timedelta(seconds=5))
    assert error.startswith(
        "The agent stopped while it ran this task (its process styrmin-agent:0123456789ab closed its "
        "connection to Styrmin at 2026-12-01 20:00:00 UTC and did not connect again within 5 s"
    )
    # A late end of the agent counts it as the server's (its own error replaces it, say).
    assert ended_because_agent_stopped(error)


def test_a_lease_runs_out_at_its_time_when_no_outage_was_seen() -> None:
    expires = T0 + timedelta(seconds=30)
    assert not lease_ran_out(expires, expires - timedelta(seconds=1), None)
    assert lease_ran_out(expires, expires, None)


def test_a_lease_that_ran_out_during_an_outage_gets_the_grace_after_it() -> None:
    expires = T0 + timedelta(seconds=30)
    back = OUTAGE.until
    assert not lease_ran_out(expires, back + timedelta(seconds=1), OUTAGE)
    assert not lease_ran_out(expires, back + LEASE_GRACE_AFTER_OUTAGE - timedelta(seconds=1), OUTAGE)
    assert lease_ran_out(expires, back + LEASE_GRACE_AFTER_OUTAGE, OUTAGE)


def test_an_old_outage_changes_nothing_for_a_later_lease() -> None:
    expires = OUTAGE.until + timedelta(hours=1)
    assert lease_ran_out(expires, expires, OUTAGE)
    assert lease_expiry_error(expires, OUTAGE).startswith("The agent stopped while it ran this task")


def test_a_lease_ended_after_an_outage_names_it_from_when_to_when() -> None:
    error = lease_expiry_error(T0 + timedelta(seconds=30), OUTAGE)
    assert "after the database came back" in error
    assert "the database was away from 2026-12-01 20:00:00 UTC to 2026-12-01 20:00:41 UTC" in error
    assert ended_because_agent_stopped(error)
    assert ended_because_agent_stopped(lease_expiry_error(T0, None))
    assert not ended_because_agent_stopped("Action upgrade failed: ...") and not ended_because_agent_stopped(
        None
    )


def test_the_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    jitter = random.Random(24)
    first = [retry_delay(1, jitter=jitter) for _ in range(50)]
    late = [retry_delay(12, jitter=jitter) for _ in range(50)]
    assert all(0.25 <= d <= 0.5 for d in first)
    assert all(2.5 <= d <= 5.0 for d in late) and len(set(late)) > 1
