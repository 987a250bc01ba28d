"""Waking the agents' waiting claims when a task becomes claimable: LISTEN/NOTIFY on PostgreSQL.

Inserting a pending task sends ``NOTIFY styrmin_task_claimable, '<cluster>'`` in the same transaction
(``store.wakeups``, channel ``TASK_CLAIMABLE``, which also wakes this process's claims at the commit),
so PostgreSQL delivers it once the task is committed, to every server on the database. Each server
process holds one connection that LISTENs (started by the first waiting claim) and wakes the claims
of that cluster waiting in the process. While that connection is down, a waiting claim looks again
every :data:`POLL_SECONDS` instead. On SQLite a claim waits for a commit of its own process (one
process serves ``styrmin up`` and owns its database file), which wakes it at once, and looks again
only when its wait is over.

A task becomes claimable when it is inserted (a change, or a change an action asked for): that
notifies. A change never waits for the change of its deployment before it (each runs as its own
workflow), so an end notifies nothing; the agent whose slot it frees claims again by itself. A lease
that ran out is ended by the next claim of its cluster, which an agent makes at least every
``wait_seconds``.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine

from styrmin_backend.store.wakeups import ANY, CLAIMABLE_CHANNEL, TASK_CLAIMABLE, Mark

POLL_SECONDS = 1.0
"""How often a waiting claim looks again on PostgreSQL while no notification can wake it. Every
50 ms it was most of the idle `styrmin up`'s CPU (each look authenticates the agent and queries the
tasks: ~8% of a core, seen with py-spy); on SQLite, every second still cost a few tenths of a percent,
for writes no other process makes."""
_RECONNECT_SECONDS = (0.5, 1.0, 2.0, 5.0)

log = logging.getLogger("styrmin.claims")


class ClaimWakeups:
    """The waiting claims of one server process, and the one connection that LISTENs for them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._notifies = engine.dialect.name == "postgresql"
        self._lock = threading.Lock()
        # Woken directly by a commit of this process that made a task claimable, and by NOTIFY.
        self._waiters = TASK_CLAIMABLE.waiters()
        self._listening = False
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    @property
    def shared_database(self) -> bool:
        """Whether other server processes may write to this database (PostgreSQL), so a wait for a
        change must look again now and then; on SQLite this process's own commits wake every wait."""
        return self._notifies

    @property
    def listening(self) -> bool:
        """Whether notifications wake claims now (else they poll)."""
        return self._listening

    def waiting(self, cluster: str) -> int:
        """How many claims of ``cluster`` wait for a notification now."""
        return self._waiters.waiting(cluster)

    def mark(self) -> Mark:
        """Take before looking for a task, then hand to :meth:`wait`, so no wake-up in between is lost."""
        self._start_listening()
        return self._waiters.mark()

    async def wait(self, cluster: str, mark: Mark, timeout: float) -> None:
        """Return once a task of ``cluster`` may have become claimable since ``mark``, or after ``timeout``."""
        if timeout <= 0:
            return
        if self._notifies and not self._listening:  # look again soon, unless a commit here wakes it
            timeout = min(POLL_SECONDS, timeout)
        await self._waiters.wait(cluster, mark, timeout)

    def wake_all(self) -> None:
        """Wake every waiting claim (the server is stopping, or notifications may have been missed)."""
        self._waiters.wake(ANY)

    def close(self) -> None:
        """Stop listening (within a second, without holding up the caller) and wake every waiting claim."""
        self._closed.set()
        self.wake_all()

    def _start_listening(self) -> None:
        if not self._notifies or self._thread is not None or self._closed.is_set():
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._listen, name="claim-wakeups", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        """Hold one LISTEN connection; connect again after an error, waking everyone once back."""
        # Imported here, in PostgreSQL's listener only: psycopg and its libraries hold about 20 MB
        # that a process serving SQLite (`styrmin up`) never uses.
        import psycopg

        failures = 0
        while not self._closed.is_set():
            listener = None
            try:
                # Outside the pool: it stays in LISTEN for the process's life.
                connection = self._engine.raw_connection()
                listener = connection.driver_connection
                connection.detach()
                assert isinstance(listener, psycopg.Connection)
                listener.autocommit = True
                listener.execute(f"LISTEN {CLAIMABLE_CHANNEL}")
                if failures:
                    log.warning("Listening for new tasks again; claims stop polling the database.")
                self._listening, failures = True, 0
                self.wake_all()  # a task inserted while no one listened is claimable now
                while not self._closed.is_set():
                    for notification in listener.notifies(timeout=1.0):
                        self._waiters.wake(notification.payload)
            except Exception as error:
                if self._closed.is_set():
                    break
                delay = _RECONNECT_SECONDS[min(failures, len(_RECONNECT_SECONDS) - 1)]
                failures += 1
                # Said once per outage; the attempts after it only at debug level.
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "Not listening for new tasks (%s: %s); claims poll the database until it is back, "
                    "trying again in %g s.",
                    type(error).__name__,
                    error,
                    delay,
                )
                self._listening = False
                self._closed.wait(delay)
            finally:
                self._listening = False
                # Closed as psycopg's own connection, not through the pool's handle: that would roll
                # back first, and log an error when the database has ended the connection already.
                if listener is not None:
                    listener.close()
