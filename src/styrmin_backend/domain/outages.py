"""Outages of the parts Styrmin needs (its database, a server, the Prefect server) and how leases are
judged around them: a lease that ran out while its agent could not reach the control plane is not
the agent's fault, so the agent gets time to renew it once the control plane serves again."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

DATABASE = "the database"
"""The part named when Styrmin's database (PostgreSQL or SQLite) cannot be reached."""

LEASE_GRACE_AFTER_OUTAGE = timedelta(seconds=30)
"""How long the agents have to renew their leases once the server reaches its database again."""

AGENT_STOPPED_ERROR = (
    "The agent stopped while it ran this task (its lease ran out at {at}); the work may be half done. "
    "Look at the deployment, then request the change again."
)
AGENT_STOPPED_AFTER_OUTAGE_ERROR = (
    "The agent did not renew this task's lease (it ran out at {at}) within {grace:g} s after {part} "
    "came back ({part} was away from {since} to {until}); the agent stopped, or could not reach the "
    "Styrmin server. The work may be half done: look at the deployment, then request the change again."
)
AGENT_GONE_ERROR = (
    "The agent stopped while it ran this task (its process {instance} closed its connection to Styrmin "
    "at {at} and did not connect again within {grace:g} s: it crashed or was killed); the work may be "
    "half done. Look at the deployment, then request the change again."
)
"""The error of a task whose agent's process went away (``instance_went_away``): it starts as
:data:`AGENT_STOPPED_ERROR` does, so everything that tells a lease's end tells this one too."""
AGENT_LATE_SUCCESS_NOTE = (
    " The agent finished the task successfully at {at}, after its lease had run out; the task stays failed "
    "because later changes may have started since."
)


def when(moment: datetime) -> str:
    """A moment as errors show it."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Outage:
    """A part of Styrmin that could not be reached, from ``since`` to ``until`` (its last failure)."""

    part: str
    since: datetime
    until: datetime

    def describe(self) -> str:
        """The outage as a person reads it."""
        seconds = (self.until - self.since).total_seconds()
        return f"{self.part} was away from {when(self.since)} to {when(self.until)} ({seconds:.0f} s)"


def lease_ran_out(
    expires_at: datetime,
    now: datetime,
    outage: Outage | None,
    grace: timedelta = LEASE_GRACE_AFTER_OUTAGE,
) -> bool:
    """Whether a lease that runs out at ``expires_at`` has run out at ``now``.

    While the server cannot reach its database no agent can renew; so a lease is counted from the
    end of the server's last outage plus ``grace``, whichever is later.
    """
    if now < expires_at:
        return False
    return outage is None or now >= outage.until + grace


def instance_went_away(connection_closed: int, connection_now: int | None) -> bool:
    """Whether an agent's instance whose presence connection number ``connection_closed`` closed is
    gone: it has not connected again since (``connection_now``, the instance's latest number, is
    still that one). None, an instance the database no longer knows, is not judged gone: its
    tasks' leases decide, as for an agent that never kept a presence connection."""
    return connection_now is not None and connection_now == connection_closed


PRESENCE_HEARTBEAT_SECONDS = 15.0
"""How often a presence connection carries a line, and its server notes that the instance is there:
often enough that no proxy closes it as idle (nginx waits 60 s by default), and that an agent
notices a server that stopped answering."""
INSTANCE_SEEN_WITHIN = timedelta(seconds=2 * PRESENCE_HEARTBEAT_SECONDS + 5)
"""An instance whose server noted it this recently still holds its presence connection: two missed
heartbeats, and a margin for a slow write, mean that its server is gone (a crashed server leaves
its instances' rows behind, and judges no one)."""


def instance_connected(seen_at: datetime, now: datetime) -> bool:
    """Whether an agent's instance last noted at ``seen_at`` (a heartbeat of its presence connection, or
    its connection) holds its presence connection at ``now``."""
    return now - seen_at <= INSTANCE_SEEN_WITHIN


def agent_gone_error(instance: str, closed_at: datetime, grace: timedelta) -> str:
    """The error of a task whose agent's instance went away (see :func:`instance_went_away`)."""
    return AGENT_GONE_ERROR.format(instance=instance, at=when(closed_at), grace=grace.total_seconds())


def lease_expiry_error(
    expires_at: datetime, outage: Outage | None, grace: timedelta = LEASE_GRACE_AFTER_OUTAGE
) -> str:
    """The error of a task whose lease ran out: naming the outage when the lease ran out in or after it."""
    if outage is not None and expires_at <= outage.until + grace:
        return AGENT_STOPPED_AFTER_OUTAGE_ERROR.format(
            at=when(expires_at),
            grace=grace.total_seconds(),
            part=outage.part,
            since=when(outage.since),
            until=when(outage.until),
        )
    return AGENT_STOPPED_ERROR.format(at=when(expires_at))


def ended_because_agent_stopped(error: str | None) -> bool:
    """Whether a task's error is one the server gave it when its lease ran out, or when its agent's
    process went away (which ends the lease early)."""
    if error is None:
        return False
    return error.startswith(
        tuple(
            text.split("{", 1)[0]
            for text in (AGENT_STOPPED_ERROR, AGENT_STOPPED_AFTER_OUTAGE_ERROR, AGENT_GONE_ERROR)
        )
    )


def retry_delay(
    attempt: int, *, first: float = 0.5, cap: float = 5.0, jitter: random.Random | None = None
) -> float:
    """Seconds before try number ``attempt`` + 1 of a call that met an outage: doubling from ``first``
    up to ``cap``, with "full jitter" in its upper half so that many callers do not come back at once."""
    ceiling = min(cap, first * 2.0 ** max(0, attempt - 1))
    spread: float = (jitter or random).uniform(0, ceiling / 2)
    return ceiling / 2 + spread
