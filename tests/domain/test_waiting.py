"""What state the Agents page, the API and styrminctl give an agent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from styrmin_backend.domain.waiting import CONNECTED_WITHIN, AgentState, agent_state

NOW = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
LONG_AGO = NOW - 10 * CONNECTED_WITHIN


def test_an_agent_with_a_connected_process_is_connected_however_long_ago_it_called() -> None:
    # A process whose slots are all taken may not call for minutes; its presence connection says it is there.
    assert (
        agent_state(revoked=False, last_seen_at=LONG_AGO, processes_connected=1, now=NOW)
        is AgentState.CONNECTED
    )
    assert (
        agent_state(revoked=False, last_seen_at=None, processes_connected=2, now=NOW) is AgentState.CONNECTED
    )


def test_an_agent_that_called_lately_is_connected_without_a_presence_connection() -> None:
    recently = NOW - CONNECTED_WITHIN + timedelta(seconds=1)
    assert (
        agent_state(revoked=False, last_seen_at=recently, processes_connected=0, now=NOW)
        is AgentState.CONNECTED
    )


def test_an_agent_without_processes_is_not_connected_or_never_was() -> None:
    assert (
        agent_state(revoked=False, last_seen_at=LONG_AGO, processes_connected=0, now=NOW)
        is AgentState.NOT_CONNECTED
    )
    assert (
        agent_state(revoked=False, last_seen_at=None, processes_connected=0, now=NOW)
        is AgentState.NEVER_CONNECTED
    )


def test_a_revoked_agent_is_revoked_even_while_its_process_is_still_connected() -> None:
    assert agent_state(revoked=True, last_seen_at=NOW, processes_connected=1, now=NOW) is AgentState.REVOKED
