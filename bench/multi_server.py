"""Several servers, several agents: two `styrmin server` processes on one PostgreSQL database, two
`styrmin agent` processes for one cluster (the local cluster) and one Prefect server, with changes
requested through both servers at once while one agent is killed with SIGKILL halfway.

Prints throughput, request-to-start latency (idle, and under the load), the database's transactions
per second (pg_stat_database.xact_commit) beside the targets, and the checks: every task ended
(succeeded, or failed with the agent-stopped error), no task ran on two agents, every
StyrminDeployment at its deployment's latest revision, no 5xx.

Usage: uv run python bench/multi_server.py [--changes 100 --deployments 20 --concurrency 4 --no-kill]

tests/production/test_multi_server.py runs the same at a smaller size.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from _figures import free_port, percentile
from cryptography.fernet import Fernet
from lightkube import Client as KubeClient
from lightkube import KubeConfig

import styrmin
from styrmin_backend.agent.prefect import LocalPrefectServer
from styrmin_backend.cluster.kube import StyrminDeployment
from styrmin_backend.domain.outages import ended_because_agent_stopped
from styrmin_backend.settings import Settings
from styrmin_localcluster import LocalCluster

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_DRIVER = REPO / "examples" / "drivers" / "shop"
POSTGRES_DSN = os.environ.get("STYRMIN_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
ADMIN_PASSWORD = "bench-admin-password"  # noqa: S105 (a throwaway admin of a throwaway database)
TARGET_CLAIM_P99_SECONDS = 0.2
TARGET_FACTOR = 3.0
_TASK_STARTED = re.compile(r"Task (\d+): ")
AGENT_GONE_SECONDS: float = Settings.model_fields["agent_gone_seconds"].default
"""How long the servers wait for a killed agent's process to connect again (their default)."""
WAIT_SECONDS = 900.0
"""How long every wait here may take on a loaded machine."""


def _postgres_url(database: str) -> str:
    params = dict(part.split("=", 1) for part in POSTGRES_DSN.split())
    return (
        f"postgresql+psycopg://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:"
        f"{params.get('port', '5432')}/{database}"
    )


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (the servers migrate it); yields its name."""
    name = f"styrmin_multi_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def transactions_committed(database: str) -> int:
    """``pg_stat_database.xact_commit`` of ``database`` (PostgreSQL updates it about once a second)."""
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        row = admin.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


class Process:
    """A `styrmin` child process in a session of its own, its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        base = {k: v for k, v in os.environ.items() if not k.startswith(("STYRMIN", "PREFECT"))}
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "styrmin_backend.cli", *args],
                env={**base, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its action processes go with it on clean-up
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the process alone, as a crashed node would lose it (its children stay)."""
        self.popen.kill()
        self.popen.wait(30)

    def stop(self) -> None:
        """Stop it and whatever it started."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


@dataclass
class Stack:
    """Two servers, two agents, the local cluster and Prefect, on one fresh database."""

    database: str
    server_urls: list[str]
    servers: list[Process]
    agents: list[Process]
    kube: KubeClient
    clients: list[styrmin.Client]


@contextlib.contextmanager
def multi_server_stack(work: Path, *, concurrency: int, lease_seconds: int) -> Iterator[Stack]:
    """Start everything under ``work``; stops it all and drops the database on exit."""
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(fresh_database())
        cluster = stack.enter_context(LocalCluster(work / "cluster", [EXAMPLE_DRIVER / "catalog"]))
        prefect = LocalPrefectServer(work / "prefect")
        prefect.start(timeout=300)
        stack.callback(prefect.stop)
        servers: list[Process] = []
        urls: list[str] = []
        secret_key = Fernet.generate_key().decode()
        for index in range(2):
            port = free_port()
            env = {
                "STYRMIN_DATABASE_URL": _postgres_url(database),
                "STYRMIN_DATA_DIR": str(work / f"server-{index}"),
                "STYRMIN_ADMIN_PASSWORD": ADMIN_PASSWORD,
                "STYRMIN_SECRET_KEY": secret_key,  # one key for both servers of the database
                "STYRMIN_PREFECT_UI_URL": prefect.url,
                "STYRMIN_LOG_LEVEL": "WARNING",
            }
            server = Process(["server", "--port", str(port)], env, work / f"server-{index}.log")
            stack.callback(server.stop)
            servers.append(server)
            urls.append(f"http://127.0.0.1:{port}")
        for server, url in zip(servers, urls, strict=True):
            _wait_ready(server, url)
        clients = []
        for url in urls:
            client = styrmin.Client(url=url, token="", timeout=120)
            client.login("admin", ADMIN_PASSWORD)
            stack.callback(client.close)
            clients.append(client)
        agents: list[Process] = []
        for index, url in enumerate(urls):
            key = clients[0].agents.create(f"agent-{index}", cluster="local").key
            env = {
                "STYRMIN_AGENT_SERVER_URL": url,
                "STYRMIN_AGENT_KEY": key,
                "STYRMIN_AGENT_KUBECONFIG": str(cluster.kubeconfig_path),
                "STYRMIN_AGENT_PREFECT_API_URL": prefect.api_url,
                "STYRMIN_AGENT_DATA_DIR": str(work / f"agent-{index}"),
                "STYRMIN_AGENT_CONCURRENCY": str(concurrency),
                "STYRMIN_AGENT_LEASE_SECONDS": str(lease_seconds),
                "STYRMIN_AGENT_RUNNER_POOL_SIZE": "2",
                "STYRMIN_AGENT_STOP_GRACE_SECONDS": "5",
                "STYRMIN_LOG_LEVEL": "INFO",
            }
            agent = Process(["agent"], env, work / f"agent-{index}.log")
            stack.callback(agent.stop)
            agents.append(agent)
        for agent in agents:
            _wait_for_line(agent, "Agent serving")
        kube = KubeClient(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="styrmin-bench")
        stack.callback(kube.close)
        clients[0].drivers.push(EXAMPLE_DRIVER)
        yield Stack(database, urls, servers, agents, kube, clients)


def _wait_ready(server: Process, url: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if server.popen.poll() is not None:
            raise RuntimeError(f"the server at {url} exited:\n{server.text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"the server at {url} was not ready:\n{server.text()[-3000:]}")


def _wait_for_line(process: Process, line: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while line not in process.text():
        if process.popen.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{process.log.name} never said {line!r}:\n{process.text()[-3000:]}")
        time.sleep(0.3)


def _configuration(round_: int) -> dict[str, Any]:
    return {"values": {"server": {"replicas": 1}, "bench": {"round": round_}}}


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def _wait_ended(client: styrmin.Client, task_ids: list[int]) -> list[styrmin.Task]:
    ended = []
    for task_id in task_ids:
        ended.append(client.tasks.wait(task_id, interval=0.5, timeout=WAIT_SECONDS))
    return ended


@dataclass
class Outcome:
    """What one run measured and found."""

    changes: int
    deployments: int
    concurrency: int
    agent_killed: bool
    one_change_seconds: float = 0.0
    idle_start_latencies: list[float] = field(default_factory=list)
    load_start_latencies: list[float] = field(default_factory=list)
    run_seconds: float = 0.0
    idle_transactions_per_second: float = 0.0
    load_transactions_per_second: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    unexpected_failures: list[str] = field(default_factory=list)
    ran_twice: list[int] = field(default_factory=list)
    overlapping: list[str] = field(default_factory=list)
    revisions_behind: list[str] = field(default_factory=list)
    server_errors: int = 0
    killed_agent_tasks_failed: int = 0
    requested_again: int = 0
    killed_after_seconds: float | None = None
    killed_at: datetime | None = None
    killed_tasks_ended_after_kill: float | None = None
    """How long after the kill the last task the killed agent held ended (failed, saying so)."""
    lease_seconds: int = 0

    @property
    def kill_bound_seconds(self) -> float | None:
        """The earliest a run with the kill can end: the servers must judge the killed agent's process
        gone first (``agent_gone_seconds`` after its presence connection closed)."""
        if self.killed_after_seconds is None:
            return None
        return self.killed_after_seconds + AGENT_GONE_SECONDS

    @property
    def throughput(self) -> float:
        return self.changes / self.run_seconds if self.run_seconds else 0.0

    @property
    def target_seconds(self) -> float:
        """3x the time of one change, times the number of changes, over the agents' concurrency."""
        return TARGET_FACTOR * self.one_change_seconds * self.changes / (2 * self.concurrency)


def run(
    work: Path,
    *,
    changes: int,
    deployments: int,
    concurrency: int = 4,
    lease_seconds: int = 15,
    idle_samples: int = 10,
    idle_load_seconds: float = 20.0,
    kill_agent: bool = True,
    log: Any = print,
) -> Outcome:
    """Start the stack, measure, drive ``changes`` over ``deployments`` through both servers, check."""
    if changes < deployments:
        raise ValueError("every deployment needs its create: ask for at least as many changes")
    outcome = Outcome(changes, deployments, concurrency, agent_killed=kill_agent, lease_seconds=lease_seconds)
    with multi_server_stack(work, concurrency=concurrency, lease_seconds=lease_seconds) as stack:
        clients = stack.clients
        log("stack up: 2 servers, 2 agents, local cluster, Prefect, PostgreSQL database", stack.database)
        # Warm-up and the time of one change: a create and configuration changes, one at a time,
        # requested through each server in turn (their request-to-start is the idle claim latency).
        warm = clients[0].deployments.create(
            "warm-up", namespace="warm-up", driver="shop", driver_version="1.0.0"
        )
        assert warm.task is not None
        first = _wait_ended(clients[0], [warm.task.id])[0]
        if first.status.value != "succeeded":
            raise RuntimeError(f"the warm-up create failed: {first.error}")
        singles: list[float] = [_seconds(first.created_at, first.ended_at) or 0.0]
        for index in range(idle_samples):
            client = clients[index % 2]
            change = client.deployments.configure("warm-up", _configuration(index))
            assert change.task is not None
            task = _wait_ended(client, [change.task.id])[0]
            singles.append(_seconds(task.created_at, task.ended_at) or 0.0)
            outcome.idle_start_latencies.append(_seconds(task.created_at, task.started_at) or 0.0)
        # One change of the mix: a create is one in ``changes / deployments`` of them.
        per_deployment = changes / deployments
        configure_mean = sum(singles[1:]) / max(1, len(singles) - 1)
        outcome.one_change_seconds = (singles[0] + (per_deployment - 1) * configure_mean) / per_deployment
        log(f"one change alone: {outcome.one_change_seconds:.2f} s (create {singles[0]:.2f} s)")

        idle_before = transactions_committed(stack.database)
        time.sleep(idle_load_seconds)
        outcome.idle_transactions_per_second = (
            transactions_committed(stack.database) - idle_before
        ) / idle_load_seconds

        names = [f"shop-{index:02d}" for index in range(deployments)]
        plan: list[tuple[str, int]] = [(name, 0) for name in names]
        for extra in range(changes - deployments):
            plan.append((names[extra % deployments], 1 + extra // deployments))
        task_ids: list[int] = []
        lock = threading.Lock()
        errors: list[str] = []

        creates_requested = threading.Barrier(2)

        def request(server: int) -> None:
            client = clients[server]
            for position, (name, round_) in enumerate(plan):
                if position == deployments:
                    creates_requested.wait()  # a configuration change needs its deployment
                if position % 2 != server:
                    continue
                try:
                    if round_ == 0:
                        change = client.deployments.create(
                            name, namespace=name, driver="shop", driver_version="1.0.0"
                        )
                    else:
                        change = client.deployments.configure(name, _configuration(round_))
                except styrmin.errors.StyrminError as error:
                    errors.append(f"{name} round {round_}: {error}")
                    continue
                assert change.task is not None
                with lock:
                    task_ids.append(change.task.id)

        load_before = transactions_committed(stack.database)
        started = time.monotonic()
        requesters = [threading.Thread(target=request, args=(server,)) for server in range(2)]
        for thread in requesters:
            thread.start()
        for thread in requesters:
            thread.join()
        if errors:
            raise RuntimeError("requests failed:\n" + "\n".join(errors))
        log(f"{len(task_ids)} changes requested through both servers in {time.monotonic() - started:.1f} s")
        if kill_agent:  # with SIGKILL, once half the changes have ended
            while _ended_count(clients[0], task_ids) < len(task_ids) // 2:
                time.sleep(0.5)
            stack.agents[1].kill()
            outcome.killed_after_seconds = time.monotonic() - started
            outcome.killed_at = datetime.now(UTC)
            log(f"agent-1 killed (SIGKILL) after {outcome.killed_after_seconds:.1f} s")
        ended = _wait_ended(clients[0], sorted(task_ids))
        last_end = max(t.ended_at for t in ended if t.ended_at is not None)
        outcome.run_seconds = (last_end - min(t.created_at for t in ended)).total_seconds()
        outcome.load_transactions_per_second = (transactions_committed(stack.database) - load_before) / (
            time.monotonic() - started
        )
        outcome.load_start_latencies = [_seconds(t.created_at, t.started_at) or 0.0 for t in ended]
        for task in ended:
            outcome.statuses[task.status.value] += 1
            if task.status.value == "failed":
                if ended_because_agent_stopped(task.error):
                    outcome.killed_agent_tasks_failed += 1
                    after_kill = _seconds(outcome.killed_at, task.ended_at)
                    if after_kill is not None:
                        outcome.killed_tasks_ended_after_kill = max(
                            after_kill, outcome.killed_tasks_ended_after_kill or 0.0
                        )
                else:
                    outcome.unexpected_failures.append(f"task {task.id} ({task.deployment}): {task.error}")
        outcome.ran_twice = _ran_on_two_agents(stack.agents)
        outcome.overlapping = _overlapping_changes(ended)

        # A change the killed agent left failed is requested again, as an operator would.
        latest = {name: clients[0].deployments.get(name) for name in names}
        again = []
        for name, deployment in latest.items():
            last = max((t for t in ended if t.deployment == name), key=lambda t: t.id)
            if last.status.value == "failed" and deployment.revision == last.revision:
                change = clients[1].tasks.retry(last.id)
                assert change.task is not None
                again.append(change.task.id)
        outcome.requested_again = len(again)
        for task in _wait_ended(clients[0], again):
            if task.status.value != "succeeded":
                outcome.unexpected_failures.append(f"requested again, task {task.id}: {task.error}")
        for name in names:
            deployment = clients[0].deployments.get(name)
            resource = stack.kube.get(StyrminDeployment, name, namespace=name)
            in_cluster = (resource.spec or {}).get("revision")  # type: ignore[attr-defined]
            if in_cluster != deployment.revision:
                outcome.revisions_behind.append(f"{name}: cluster {in_cluster}, latest {deployment.revision}")
        outcome.server_errors = sum(_server_errors(url) for url in stack.server_urls)
    return outcome


def _ended_count(client: styrmin.Client, task_ids: list[int]) -> int:
    wanted = set(task_ids)
    return sum(
        1 for task in client.tasks.iter(page_size=200) if task.id in wanted and task.ended_at is not None
    )


def _ran_on_two_agents(agents: list[Process]) -> list[int]:
    """Tasks that more than one agent started, or one agent started twice."""
    started = Counter(int(match) for agent in agents for match in _TASK_STARTED.findall(agent.text()))
    return sorted(task for task, times in started.items() if times > 1)


def _overlapping_changes(tasks: list[styrmin.Task]) -> list[str]:
    """Pairs of changes of one deployment that ran at the same time (they may: only their Helm
    operations take turns)."""
    found = []
    by_deployment: dict[str, list[styrmin.Task]] = {}
    for task in tasks:
        if task.started_at is not None and task.parent_task_id is None:
            by_deployment.setdefault(task.deployment, []).append(task)
    for name, runs in by_deployment.items():
        runs.sort(key=lambda t: t.started_at or t.created_at)
        for before, after in itertools.pairwise(runs):
            if before.ended_at is None or (after.started_at and after.started_at < before.ended_at):
                found.append(f"{name}: tasks {before.id} and {after.id}")
    return found


def _server_errors(url: str) -> int:
    """Answers with a 5xx status this server counted (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    total = 0
    for line in text.splitlines():
        if line.startswith("styrmin_http_requests_total{") and 'status="5' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def report(outcome: Outcome) -> list[str]:
    """The figures, one a line, with their targets."""
    idle = outcome.idle_start_latencies
    load = outcome.load_start_latencies
    return [
        f"changes: {outcome.changes} over {outcome.deployments} deployments, 2 servers, "
        f"2 agents x concurrency {outcome.concurrency}, "
        + ("one agent killed (SIGKILL) halfway" if outcome.agent_killed else "no agent killed"),
        f"throughput: {outcome.throughput:.2f} changes/s ({outcome.run_seconds:.1f} s for {outcome.changes}; "
        f"target <= {outcome.target_seconds:.1f} s = {TARGET_FACTOR:g} x {outcome.one_change_seconds:.2f} s "
        f"x {outcome.changes} / {2 * outcome.concurrency})",
        *(
            [
                f"  with the kill, no run ends before {outcome.kill_bound_seconds:.1f} s: the killed agent's "
                f"tasks (and their Helm locks) end once the servers judge its process gone, "
                f"{AGENT_GONE_SECONDS:g} s after its presence connection closed at the kill at "
                f"{outcome.killed_after_seconds:.1f} s (STYRMIN_AGENT_GONE_SECONDS; its {outcome.lease_seconds} s "
                "leases would have run on); --no-kill measures the two agents alone",
                "  the killed agent's tasks ended "
                + (
                    f"{outcome.killed_tasks_ended_after_kill:.1f} s after the kill, the last of them"
                    if outcome.killed_tasks_ended_after_kill is not None
                    else "(it held none)"
                ),
            ]
            if outcome.kill_bound_seconds is not None
            else []
        ),
        f"request-to-start, idle agents: p50 {percentile(idle, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(idle, 0.99) * 1000:.0f} ms (target p99 <= {TARGET_CLAIM_P99_SECONDS * 1000:.0f} ms)",
        f"request-to-start, under the load (queueing included): p50 {percentile(load, 0.5):.2f} s, "
        f"p99 {percentile(load, 0.99):.2f} s",
        f"database load: {outcome.idle_transactions_per_second:.1f} transactions/s idle (2 agents waiting), "
        f"{outcome.load_transactions_per_second:.1f} transactions/s under the load (pg_stat_database.xact_commit)",
        f"tasks: {dict(outcome.statuses)}; failed with the agent-stopped error: "
        f"{outcome.killed_agent_tasks_failed}, requested again: {outcome.requested_again}",
        f"other failures: {outcome.unexpected_failures or 'none'}",
        f"ran on two agents: {outcome.ran_twice or 'none'}; "
        "changes of one deployment side by side (each its own workflow; only Helm operations take turns): "
        f"{outcome.overlapping or 'none'}",
        f"StyrminDeployments behind their latest revision: {outcome.revisions_behind or 'none'}",
        f"5xx answers: {outcome.server_errors}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4, help="tasks each agent runs at once")
    parser.add_argument(
        "--no-kill", action="store_true", help="kill no agent (the throughput of the two agents alone)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="styrmin-multi-") as scratch:
        outcome = run(
            Path(scratch),
            changes=args.changes,
            deployments=args.deployments,
            concurrency=args.concurrency,
            kill_agent=not args.no_kill,
            log=lambda *parts: print("..", *parts, flush=True),
        )
    for line in report(outcome):
        print(line)


if __name__ == "__main__":
    main()
