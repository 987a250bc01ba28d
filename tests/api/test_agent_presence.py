"""An agent's process keeps a presence connection open: when it closes and the process does not come
back within ``agent_gone_seconds``, the tasks that process claimed end failed at once, and their Helm
locks are let go of. Served by uvicorn on loopback, so the connection really closes."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from styrmin_backend.api.serving import announce_stop
from styrmin_backend.server_app import create_app
from styrmin_backend.store.models import AgentInstanceRow, AgentRow, HelmLockRow
from tests.support.loopback import served
from tests.support.waiting import wait_for
from tests.web.conftest import login_client

from .conftest import ADMIN_PASSWORD, Stack

GONE_SECONDS = 1.0
INSTANCE = "styrmin-agent:0123456789ab"
CREATE = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}


@pytest.fixture
def served_app(stack: Stack, caplog: pytest.LogCaptureFixture) -> Iterator[tuple[Any, str]]:
    """A second app on the stack's database, served on loopback, judging agents gone after 1 s."""
    caplog.set_level(logging.INFO, logger="styrmin.agents")
    settings = stack.settings.model_copy(update={"agent_gone_seconds": GONE_SECONDS})
    app = create_app(settings, stack.engine)
    with served(app) as url:
        yield app, url


def judged_now(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The server's judgements of closed presence connections so far."""
    return [
        r.getMessage() for r in caplog.records if r.name == "styrmin.agents" and "process" in r.getMessage()
    ]


def judged(caplog: pytest.LogCaptureFixture, count: int = 1) -> list[str]:
    """Wait until the server judged ``count`` closed presence connections; their log lines."""

    wait_for(lambda: len(judged_now(caplog)) >= count, timeout=60, message=f"{count} judgement(s)")
    return judged_now(caplog)


def _agent(stack: Stack, name: str = "edge") -> dict[str, str]:
    admin = stack.headers(stack.token_for("admin"))
    created = stack.client.post("/api/v1/agents", json={"name": name, "cluster": "local"}, headers=admin)
    assert created.status_code == 201, created.text
    return stack.headers(created.json()["key"])


def _deploy(stack: Stack, name: str = "shop") -> int:
    stack.add_driver()
    admin = stack.headers(stack.token_for("admin"))
    created = stack.client.post("/api/v1/deployments", json={**CREATE, "name": name}, headers=admin)
    assert created.status_code == 202, created.text
    task_id: int = created.json()["task"]["id"]
    return task_id


@contextlib.contextmanager
def presence(
    url: str, headers: dict[str, str], instance: str = INSTANCE, gone_after: float = GONE_SECONDS
) -> Iterator[Iterator[str]]:
    """The instance's presence connection, open inside the block, closed at its end; yields its lines
    after the first (dropping the iterator would close the connection)."""
    with (
        httpx.Client(base_url=url, headers=headers, timeout=30) as client,
        client.stream("GET", f"/api/v1/agent/instances/{instance}/presence") as response,
    ):
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        first = json.loads(next(lines))
        assert first == {"heartbeat_seconds": 15.0, "gone_after_seconds": gone_after}
        yield lines


def _claim(url: str, headers: dict[str, str], instance: str | None = INSTANCE) -> dict[str, Any]:
    body: dict[str, Any] = {"lease_seconds": 600}
    if instance is not None:
        body["instance"] = instance
    claimed = httpx.post(f"{url}/api/v1/agent/claim", json=body, headers=headers, timeout=30)
    assert claimed.status_code == 200, claimed.text
    answer: dict[str, Any] = claimed.json()
    return answer


def _processes_gone(url: str, agent: str) -> float:
    """``styrmin_agent_processes_gone_total`` of ``agent``'s processes that ran tasks, on the server
    at ``url`` (the counter is the process's: other tests' judgements count too)."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f'styrmin_agent_processes_gone_total{{agent="{agent}",with_tasks="true"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _status(stack: Stack, task_id: int) -> dict[str, Any]:
    answer: dict[str, Any] = stack.client.get(
        f"/api/v1/tasks/{task_id}", headers=stack.headers(stack.token_for("admin"))
    ).json()
    return answer


def test_a_task_ends_failed_soon_after_its_agent_process_goes_away_and_lets_go_of_its_helm_lock(
    stack: Stack, served_app: tuple[Any, str]
) -> None:
    _app, url = served_app
    task_id = _deploy(stack)
    agent = _agent(stack)
    with presence(url, agent):
        claimed = _claim(url, agent)
        assert claimed["task"]["id"] == task_id
        lock = httpx.post(
            f"{url}/api/v1/agent/tasks/{task_id}/helm-lock",
            json={"namespace": "shop", "release": "shop", "lease_seconds": 600},
            headers=agent,
        )
        assert lock.json()["acquired"] is True, lock.text
        time.sleep(2 * GONE_SECONDS)  # open: the task runs on, however long
        assert _status(stack, task_id)["status"] == "running"
        gone_before = _processes_gone(url, "edge")
    # Closed, as the process's crash closes it: the task ends long before its 600 s lease would.
    wait_for(lambda: _status(stack, task_id)["status"] != "running", timeout=60, message="the task to end")
    task = _status(stack, task_id)
    assert task["status"] == "failed"
    assert task["error"].startswith(
        f"The agent stopped while it ran this task (its process {INSTANCE} closed its connection to Styrmin at "
    ), task["error"]
    assert f"did not connect again within {GONE_SECONDS:g} s" in task["error"]
    with stack.session() as session:
        assert session.query(HelmLockRow).count() == 0
        assert session.query(AgentInstanceRow).count() == 0  # judged gone, forgotten
    # Operators can alert on it: the server counts the agent's processes it judged gone.
    assert _processes_gone(url, "edge") == gone_before + 1
    # Its actions token was revoked with the end, and the agent's late calls are refused.
    token = claimed["actions_token"]
    assert stack.client.get("/api/v1/deployments/shop", headers=stack.headers(token)).status_code == 401
    late = httpx.post(f"{url}/api/v1/agent/tasks/{task_id}/lease", json={"lease_seconds": 60}, headers=agent)
    assert late.status_code == 409, late.text


def test_a_process_that_connects_again_within_the_grace_keeps_its_tasks(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="styrmin.agents")
    # A grace a busy machine surely opens a connection within.
    app = create_app(stack.settings.model_copy(update={"agent_gone_seconds": 3.0}), stack.engine)
    task_id = _deploy(stack)
    agent = _agent(stack)
    with served(app) as url:
        with presence(url, agent, gone_after=3.0):
            _claim(url, agent)
        with presence(url, agent, gone_after=3.0):  # a proxy closed it, say: the agent opens it again
            (line,) = judged(caplog)
            assert "connected again" in line, line
            assert _status(stack, task_id)["status"] == "running"
        (_, line) = judged(caplog, 2)
        assert "the tasks it ran ended failed: [1]" in line
    assert _status(stack, task_id)["status"] == "failed"


def test_a_stopping_server_ends_presence_connections_and_judges_no_one(
    stack: Stack, served_app: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    app, url = served_app
    task_id = _deploy(stack)
    agent = _agent(stack)
    with presence(url, agent) as lines:
        _claim(url, agent)
        ended = threading.Event()

        def read_to_the_end() -> None:
            for _line in lines:
                pass
            ended.set()

        reader = threading.Thread(target=read_to_the_end, daemon=True)
        reader.start()
        announce_stop(app)
        assert ended.wait(30), "the presence connection did not end when the server began to stop"
    time.sleep(2 * GONE_SECONDS)  # no judgement comes: nothing to wait for
    assert not judged_now(caplog)
    assert _status(stack, task_id)["status"] == "running"


def test_tasks_of_other_instances_and_other_agents_are_not_touched(
    stack: Stack, served_app: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    _app, url = served_app
    first, second, third = (_deploy(stack, name) for name in ("shop", "two", "three"))
    agent, other = _agent(stack), _agent(stack, "other")
    assert _claim(url, agent)["task"]["id"] == first
    assert _claim(url, agent, "styrmin-agent:ffffffffffff")["task"]["id"] == second
    assert _claim(url, other)["task"]["id"] == third  # another agent's process, named the same
    # The first agent's INSTANCE comes and goes; so does the other agent's, under the same name.
    with presence(url, agent):
        pass
    with presence(url, other):
        pass
    judged(caplog, 2)
    assert _status(stack, first)["status"] == "failed"
    assert _status(stack, third)["status"] == "failed"
    assert _status(stack, second)["status"] == "running"  # its process never said it went away


def test_a_task_claimed_without_an_instance_keeps_its_lease(
    stack: Stack, served_app: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    _app, url = served_app
    task_id = _deploy(stack)
    agent = _agent(stack)
    with presence(url, agent):
        _claim(url, agent, instance=None)  # an agent of an earlier version
    (line,) = judged(caplog)
    assert "it ran no task" in line, line
    assert _status(stack, task_id)["status"] == "running"


@pytest.mark.parametrize("instance", ["", "-leading-dash", "has space", "x" * 65, "semi;colon"])
def test_an_instance_name_out_of_its_pattern_is_refused_naming_it(stack: Stack, instance: str) -> None:
    _deploy(stack)
    agent = _agent(stack)
    claim = stack.client.post("/api/v1/agent/claim", json={"instance": instance}, headers=agent)
    assert claim.status_code == 422 and "instance" in claim.text, claim.text
    assert (
        stack.client.get("/api/v1/tasks/1", headers=stack.headers(stack.token_for("admin"))).json()["status"]
        == "pending"
    )  # the refused claim changed nothing
    if instance:  # an empty path segment is another route
        opened = stack.client.get(f"/api/v1/agent/instances/{instance}/presence", headers=agent)
        assert opened.status_code in (404, 422), opened.text
        if opened.status_code == 422:
            assert "instance" in opened.text


def test_a_presence_connection_needs_a_valid_agent_key(stack: Stack) -> None:
    opened = stack.client.get(f"/api/v1/agent/instances/{INSTANCE}/presence")
    assert opened.status_code == 401
    wrong = stack.client.get(
        f"/api/v1/agent/instances/{INSTANCE}/presence", headers={"Authorization": "Bearer sta_wrong"}
    )
    assert wrong.status_code == 401


def test_an_agent_holds_at_most_so_many_presence_connections_on_a_server(
    stack: Stack, served_app: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from styrmin_backend.api.routes import agent as agent_routes

    monkeypatch.setattr(agent_routes, "MAX_PRESENCE_CONNECTIONS", 2)
    _app, url = served_app
    agent, other = _agent(stack), _agent(stack, "other")
    with (
        presence(url, agent, "styrmin-agent:000000000001"),
        presence(url, agent, "styrmin-agent:000000000002"),
    ):
        third = httpx.get(f"{url}/api/v1/agent/instances/styrmin-agent:000000000003/presence", headers=agent)
        assert third.status_code == 429, third.text
        assert third.json()["field"] == "instance" and "at most 2" in third.json()["message"]
        assert third.headers["retry-after"] == "15"
        with presence(url, other):  # another agent's are its own
            pass
    with presence(url, agent, "styrmin-agent:000000000003"):  # closed ones count no more
        pass


def test_the_server_keeps_the_instances_that_connected_last_of_each_agent(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import select

    from styrmin_backend.services import agents

    monkeypatch.setattr(agents, "MAX_INSTANCES_KEPT", 3)
    with stack.session() as session:
        agent, other = (
            agents.authenticate_agent(session, agents.create_agent(session, name, "local")[1])
            for name in ("edge", "other")
        )
    with stack.session() as session:
        assert agents.connect_instance(session, other, INSTANCE) == 1
    for number in range(1, 6):
        with stack.session() as session:
            assert agents.connect_instance(session, agent, f"styrmin-agent:00000000000{number}") == 1
    with stack.session() as session:
        assert agents.connect_instance(session, agent, "styrmin-agent:000000000005") == 2  # again: kept
        kept = set(session.execute(select(AgentInstanceRow.agent_id, AgentInstanceRow.instance)).all())
    assert kept == {
        (other.id, INSTANCE),
        *((agent.id, f"styrmin-agent:00000000000{number}") for number in (3, 4, 5)),
    }


def _listed(stack: Stack) -> dict[str, list[dict[str, Any]]]:
    """Agent name -> the processes ``GET /api/v1/agents`` lists as connected."""
    answer = stack.client.get("/api/v1/agents", headers=stack.headers(stack.token_for("admin")))
    assert answer.status_code == 200, answer.text
    return {agent["name"]: agent["processes"] for agent in answer.json()}


def test_the_agents_list_and_page_show_each_connected_process_and_the_tasks_it_runs(
    stack: Stack, served_app: tuple[Any, str]
) -> None:
    _app, url = served_app
    task_id = _deploy(stack)
    agent = _agent(stack)
    idle = "styrmin-agent:0000000000ff"
    with presence(url, agent), presence(url, agent, instance=idle):
        assert _claim(url, agent)["task"]["id"] == task_id
        listed = _listed(stack)["edge"]
        assert [(p["instance"], p["running_tasks"]) for p in listed] == [(INSTANCE, [task_id]), (idle, [])]
        assert all(p["connected_at"] <= p["seen_at"] for p in listed)

        login_client(stack.client, "admin", ADMIN_PASSWORD)
        page = stack.client.get("/agents")
        assert page.status_code == 200
        processes = page.text.split('aria-label="Processes of agent edge"', 1)[1].split("</ul>", 1)[0]
        assert INSTANCE in processes and idle in processes
        assert f'<a href="/tasks/{task_id}">task {task_id}</a>' in processes
    # Closed, and judged gone: neither is listed any more.
    wait_for(lambda: _listed(stack)["edge"] == [], timeout=60, message="the processes to leave the list")
    assert "none connected" in stack.client.get("/agents").text


def test_a_process_whose_server_no_longer_notes_it_leaves_the_list(stack: Stack) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from styrmin_backend.clock import utcnow
    from styrmin_backend.domain.outages import INSTANCE_SEEN_WITHIN
    from styrmin_backend.services import agents

    task_id = _deploy(stack)
    key = _agent(stack)["Authorization"].removeprefix("Bearer ")
    with stack.session() as session:
        edge = agents.authenticate_agent(session, key)
        connection = agents.connect_instance(session, edge, INSTANCE)
    assert [p["instance"] for p in _listed(stack)["edge"]] == [INSTANCE]

    def seen_long_ago() -> None:  # as a server that crashed while holding the connection leaves it
        with stack.session() as session:
            session.execute(update(AgentInstanceRow).values(seen_at=utcnow() - 2 * INSTANCE_SEEN_WITHIN))

    def state() -> str:
        answer = stack.client.get("/api/v1/agents", headers=stack.headers(stack.token_for("admin")))
        states: dict[str, str] = {agent["name"]: agent["state"] for agent in answer.json()}
        return states["edge"]

    def waits_for() -> str:  # why the pending task waits: the same rule counts the agent
        task = stack.client.get(f"/api/v1/tasks/{task_id}", headers=stack.headers(stack.token_for("admin")))
        reason: str = task.json()["waiting"]["reason"]
        return reason

    with stack.session() as session:  # it has not claimed for long: its connection says it is there
        session.execute(
            update(AgentRow)
            .where(AgentRow.name == "edge")
            .values(last_seen_at=utcnow() - timedelta(minutes=5))
        )
    assert state() == "connected"
    assert waits_for() == "not-claimed"
    seen_long_ago()
    assert _listed(stack)["edge"] == []
    assert state() == "not-connected"
    assert waits_for() == "no-agent"
    with stack.session() as session:  # a heartbeat of an older connection: a newer one's server notes it
        agents.note_instance_seen(session, edge, INSTANCE, connection - 1)
    assert _listed(stack)["edge"] == []
    with stack.session() as session:  # a heartbeat of its connection
        agents.note_instance_seen(session, edge, INSTANCE, connection)
    assert [p["instance"] for p in _listed(stack)["edge"]] == [INSTANCE]
