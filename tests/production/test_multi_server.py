"""Two servers and two agents on one PostgreSQL database keep every promise while one agent is killed.

The benchmark bench/multi_server.py starts the stack and drives the changes; this test runs it at a
smaller size and checks what it found, with no time limit (speed is the benchmark's).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import multi_server

pytestmark = pytest.mark.slow


def test_changes_through_two_servers_all_end_once_each_while_an_agent_is_killed(tmp_path: Path) -> None:
    outcome = multi_server.run(
        tmp_path, changes=20, deployments=5, concurrency=2, idle_samples=2, idle_load_seconds=2
    )
    report = "\n".join(multi_server.report(outcome))
    assert sum(outcome.statuses.values()) == 20, report
    # Every task ended: succeeded, or failed because the killed agent held it.
    assert set(outcome.statuses) <= {"succeeded", "failed"}, report
    assert outcome.unexpected_failures == [], report
    assert outcome.statuses["failed"] == outcome.killed_agent_tasks_failed, report
    assert outcome.ran_twice == [], report
    # Changes of one deployment may run side by side (each is its own workflow, as the seed has it);
    # only their Helm operations take turns, so none failed on Helm's "another operation is in
    # progress": that would be among the unexpected failures above.
    assert outcome.revisions_behind == [], report
    assert outcome.server_errors == 0, report
