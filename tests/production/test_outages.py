"""Outages on the production form (two servers, two agents that know both, a PostgreSQL of the test's
own stopped and started by it): a short one fails nothing, a long one ends every task once and says
why, and a server killed for longer than a lease and the retry time loses nothing.

The benchmark bench/outage.py starts the stack and drives the upgrades; these tests run it at a small
size and check what it found, with generous waits (never a time limit). An outage here is "long" by
what it outlasts, not by its own length: the agents' 15 s leases (bench/outage.py's outage_stack) and
the retry time each test passes. The benchmark tries the 60 s outages of the target (issue 24).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import outage

pytestmark = pytest.mark.slow


def test_a_10_s_database_outage_fails_no_task_and_no_request_gets_a_500(tmp_path: Path) -> None:
    found = outage.run(tmp_path, part="database", seconds=10, deployments=3, rounds=1)
    report = "\n".join(outage.report(found))
    print(report)  # shown with -rP
    assert found.statuses["succeeded"] == found.tasks == 3, report
    assert found.answers[500] == 0 and found.answers[503] > 0, report
    assert found.ran_twice == [], report


def test_a_20_s_database_outage_ends_every_task_once_each_failed_one_naming_the_database(
    tmp_path: Path,
) -> None:
    # A retry time shorter than the outage, so that tasks do fail: each must say the database was away.
    # The outage outlasts the 15 s leases too, so the server must not blame the agents once it is back.
    # An end waits three retry times (27 s), longer than the outage even when it began with it, so the
    # agents' own account of each failure lands.
    found = outage.run(tmp_path, part="database", seconds=20, retry_seconds=9, deployments=3, rounds=1)
    report = "\n".join(outage.report(found))
    print(report)  # shown with -rP
    assert sum(found.statuses.values()) == found.tasks == 3, report
    assert set(found.statuses) <= {"succeeded", "failed"}, report
    assert all("database" in failure for failure in found.failures), report
    assert "The agent stopped while it ran this task" not in report, report
    assert found.answers[500] == 0, report
    assert found.ran_twice == [], report


def test_a_server_killed_for_20_s_loses_nothing_and_its_agent_goes_on_through_the_other(
    tmp_path: Path,
) -> None:
    # Longer than the 15 s leases and the 15 s retry time: an agent that kept to the killed server
    # would lose its tasks' leases and give up its steps, so only going on through the other saves them.
    found = outage.run(tmp_path, part="server", seconds=20, retry_seconds=15, deployments=3, rounds=1)
    report = "\n".join(outage.report(found))
    print(report)  # shown with -rP
    assert found.statuses["succeeded"] == found.tasks == 3, report
    assert found.ran_twice == [] and found.answers[500] == 0, report
    assert found.switched_server, report
