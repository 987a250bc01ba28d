"""Outages on the production form: two `styrmin server` processes on a PostgreSQL of this script's own
(initdb and pg_ctl, on a free port, in a temporary folder), two `styrmin agent` processes that each
know both servers, the local cluster and Prefect; upgrades of the example driver in flight while
PostgreSQL is stopped and started again, or while one server is killed and started again.

For each scenario it prints the outage's length, what failed (tasks, and answers with a 500: a 503
naming the database is the expected answer meanwhile), whether a task ran twice, and the longest
outage survived with nothing failed beside the target (60 s for PostgreSQL and for a server).

Usage: uv run python bench/outage.py [--database 10,30,60 --server 60 --deployments 4 --retry-seconds 90]

tests/production/test_outages.py runs the same scenarios at a smaller size.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from _figures import free_port, hold_free_ports
from cryptography.fernet import Fernet
from multi_server import (
    _TASK_STARTED,
    ADMIN_PASSWORD,
    EXAMPLE_DRIVER,
    WAIT_SECONDS,
    Process,
    _wait_for_line,
    _wait_ready,
)

import styrmin
from styrmin_backend.agent.prefect import LocalPrefectServer
from styrmin_backend.agent.server_api import DEFAULT_RETRY_SECONDS
from styrmin_localcluster import LocalCluster

POSTGRES_BIN = Path(os.environ.get("STYRMIN_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
TARGET_SECONDS = 60.0
"""The outage length that must fail nothing (issue 24): a PostgreSQL restart or a server replaced."""


class OwnPostgres:
    """A PostgreSQL cluster of this process's own, in a temporary folder, on a free port.

    Run as root, the cluster belongs to the ``postgres`` user (initdb refuses root).
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="styrmin-outage-pg-"))
        self.port = free_port()
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.folder, "postgres")
        self._run(POSTGRES_BIN / "initdb", "-D", str(self.folder / "data"), "-U", "postgres", "--auth=trust")

    def _run(self, *args: Any) -> None:
        subprocess.run([*self._as, *map(str, args)], check=True, capture_output=True, timeout=WAIT_SECONDS)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c max_connections=200"
        self._run(
            POSTGRES_BIN / "pg_ctl", "-D", self.folder / "data", "-o", options, "-l", self.folder / "log",
            "-w", "-t", "300", "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop it as an operator's restart does: connections end, new ones are refused."""
        self._run(
            POSTGRES_BIN / "pg_ctl", "-D", self.folder / "data", "-m", "fast", "-w", "-t", "300", "stop"
        )

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class OutageStack:
    """Two servers and two agents that know both, on a PostgreSQL of their own."""

    postgres: OwnPostgres
    server_urls: list[str]
    servers: list[Process]
    start_server: Callable[[int], Process]
    agents: list[Process]
    clients: list[styrmin.Client]


@contextlib.contextmanager
def outage_stack(
    work: Path, *, concurrency: int, retry_seconds: float, lease_seconds: int = 15
) -> Iterator[OutageStack]:
    """Start everything under ``work``; stop it all (and remove the PostgreSQL cluster) on exit."""
    with contextlib.ExitStack() as stack:
        postgres = OwnPostgres()
        stack.callback(postgres.remove)
        postgres.start()
        with psycopg.connect(postgres.dsn, autocommit=True) as admin:
            admin.execute('CREATE DATABASE "styrmin"')
        # Prefect's start (about 16 s) runs beside the local cluster's and the servers': only the agents
        # need it.
        pool = stack.enter_context(ThreadPoolExecutor(2))
        # The servers' ports are held from before Prefect and the cluster pick theirs until the servers
        # start: Prefect binds its port only once it has started, which the servers' start may precede.
        held = hold_free_ports(2)
        ports = [sock.getsockname()[1] for sock in held]
        prefect = LocalPrefectServer(work / "prefect")
        prefect_started = pool.submit(prefect.start, timeout=300)

        def stop_prefect() -> None:
            wait([prefect_started])  # a start still under way is stopped once it is done
            prefect.stop()

        stack.callback(stop_prefect)
        cluster = stack.enter_context(LocalCluster(work / "cluster", [EXAMPLE_DRIVER / "catalog"]))
        secret_key = Fernet.generate_key().decode()
        for sock in held:
            sock.close()
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        servers: list[Process] = []

        def start_server(index: int) -> Process:
            env = {
                "STYRMIN_DATABASE_URL": postgres.url("styrmin"),
                "STYRMIN_DATA_DIR": str(work / f"server-{index}"),
                "STYRMIN_ADMIN_PASSWORD": ADMIN_PASSWORD,
                "STYRMIN_SECRET_KEY": secret_key,
                "STYRMIN_PREFECT_UI_URL": prefect.url,
                # The actions reach Styrmin through one address (in a cluster: its Service); here the
                # first server's, which the server scenario never kills.
                "STYRMIN_PUBLIC_URL": urls[0],
                "STYRMIN_LOG_LEVEL": "WARNING",
            }
            log = work / f"server-{index}-{int(time.time() * 1000)}.log"
            server = Process(["server", "--port", str(ports[index])], env, log)
            stack.callback(server.stop)
            return server

        servers = [start_server(0)]
        _wait_ready(servers[0], urls[0])  # the first one migrates the database
        servers.append(start_server(1))
        _wait_ready(servers[1], urls[1])
        clients = []
        for url in urls:
            client = styrmin.Client(url=url, token="", timeout=120, retry_seconds=WAIT_SECONDS)
            client.login("admin", ADMIN_PASSWORD)
            stack.callback(client.close)
            clients.append(client)
        agents: list[Process] = []
        # Stopped side by side (each waits for its actions' grace period), not one after the other.
        stack.callback(lambda: list(pool.map(Process.stop, agents)))
        prefect_started.result()
        for index in range(2):
            key = clients[0].agents.create(f"agent-{index}", cluster="local").key
            env = {
                "STYRMIN_AGENT_SERVER_URL": f"{urls[index]},{urls[1 - index]}",
                "STYRMIN_AGENT_KEY": key,
                "STYRMIN_AGENT_KUBECONFIG": str(cluster.kubeconfig_path),
                "STYRMIN_AGENT_PREFECT_API_URL": prefect.api_url,
                "STYRMIN_AGENT_DATA_DIR": str(work / f"agent-{index}"),
                "STYRMIN_AGENT_CONCURRENCY": str(concurrency),
                "STYRMIN_AGENT_LEASE_SECONDS": str(lease_seconds),
                "STYRMIN_AGENT_RUNNER_POOL_SIZE": "2",
                "STYRMIN_AGENT_STOP_GRACE_SECONDS": "5",
                "STYRMIN_RETRY_SECONDS": f"{retry_seconds:g}",
                "STYRMIN_LOG_LEVEL": "INFO",
            }
            agents.append(Process(["agent"], env, work / f"agent-{index}.log"))
        for agent in agents:
            _wait_for_line(agent, "Agent serving")
        clients[0].drivers.push(EXAMPLE_DRIVER)
        yield OutageStack(postgres, urls, servers, start_server, agents, clients)


@dataclass
class Outcome:
    """What one scenario found."""

    part: str
    seconds: float
    retry_seconds: float
    tasks: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    answers: Counter[int] = field(default_factory=Counter)
    """The status of each read a user made of each server during the outage (0: no answer)."""
    ran_twice: list[int] = field(default_factory=list)
    switched_server: bool = False

    @property
    def nothing_failed(self) -> bool:
        return not self.failures and not self.ran_twice and self.answers[500] == 0


class _Reader(threading.Thread):
    """Reads the deployments through each server twice a second, counting the answers' statuses."""

    def __init__(self, urls: list[str], token: str) -> None:
        super().__init__(daemon=True)
        self.urls, self.token = urls, token
        self.answers: Counter[int] = Counter()
        self.done = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        while not self.done.is_set():
            for url in self.urls:
                try:
                    status = httpx.get(f"{url}/api/v1/deployments", headers=headers, timeout=30).status_code
                except httpx.HTTPError:
                    status = 0
                self.answers[status] += 1
            self.done.wait(0.5)


def run(
    work: Path,
    *,
    part: str,
    seconds: float,
    retry_seconds: float = 60,
    deployments: int = 4,
    rounds: int = 2,
    concurrency: int = 2,
    log: Any = print,
) -> Outcome:
    """``part`` ("database" or "server") away for ``seconds`` while upgrades of ``deployments`` run."""
    outcome = Outcome(part, seconds, retry_seconds)
    with outage_stack(work, concurrency=concurrency, retry_seconds=retry_seconds) as stack:
        client = stack.clients[0]
        names = [f"shop-{index:02d}" for index in range(deployments)]
        creates = [
            client.deployments.create(n, namespace=n, driver="shop", driver_version="1.0.0") for n in names
        ]
        for change in creates:
            assert change.task is not None
            created = client.tasks.wait(change.task.id, interval=0.5, timeout=WAIT_SECONDS)
            if created.status.value != "succeeded":
                raise RuntimeError(f"create of {created.deployment} failed: {created.error}")
        log(f"{deployments} deployments created")
        task_ids: list[int] = []
        for round_ in range(rounds):
            for position, name in enumerate(names):
                change = stack.clients[position % 2].deployments.upgrade(
                    name, app_version=f"{2 + round_}.0.0"
                )
                assert change.task is not None
                task_ids.append(change.task.id)
        deadline = time.monotonic() + WAIT_SECONDS
        while sum(1 for t in task_ids if client.tasks.get(t).status.value == "running") < min(
            2, len(task_ids)
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("no upgrade started")
            time.sleep(0.3)
        reader = _Reader(
            stack.server_urls if part == "database" else stack.server_urls[:1], client.token or ""
        )
        reader.start()
        began = time.monotonic()
        if part == "database":
            stack.postgres.stop()
            log(f"PostgreSQL stopped with {len(task_ids)} upgrades requested")
            time.sleep(max(0.0, seconds - (time.monotonic() - began)))
            stack.postgres.start()
        else:
            stack.servers[1].kill()
            log(f"server 1 killed (SIGKILL) with {len(task_ids)} upgrades requested")
            time.sleep(max(0.0, seconds - (time.monotonic() - began)))
            stack.servers[1] = stack.start_server(1)
            _wait_ready(stack.servers[1], stack.server_urls[1])
        log(f"{part} back after {time.monotonic() - began:.1f} s")
        reader.done.set()
        reader.join()
        outcome.answers = reader.answers
        ended = [client.tasks.wait(t, interval=0.5, timeout=WAIT_SECONDS) for t in task_ids]
        outcome.tasks = len(ended)
        for task in ended:
            outcome.statuses[task.status.value] += 1
            if task.status.value != "succeeded":
                outcome.failures.append(f"task {task.id} ({task.deployment}): {task.error}")
        started = Counter(int(m) for agent in stack.agents for m in _TASK_STARTED.findall(agent.text()))
        outcome.ran_twice = sorted(task for task, times in started.items() if times > 1)
        outcome.switched_server = any(
            f"Claiming from and reporting to the Styrmin server at {stack.server_urls[0]} (instead of"
            in a.text()
            for a in stack.agents
        )
    return outcome


def report(outcome: Outcome) -> list[str]:
    """The scenario's figures, one a line."""
    away = "PostgreSQL stopped" if outcome.part == "database" else "one of two servers killed"
    return [
        f"{away} for {outcome.seconds:g} s (retry time {outcome.retry_seconds:g} s): "
        f"tasks {dict(outcome.statuses)} of {outcome.tasks}; reads answered {dict(outcome.answers)} "
        f"(500s: {outcome.answers[500]}, target 0); ran twice: {outcome.ran_twice or 'none'}"
        + ("; an agent went on through the other server" if outcome.switched_server else ""),
        *(f"  failed: {failure}" for failure in outcome.failures),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", default="10,30,60", help="PostgreSQL outage lengths to try, in seconds")
    parser.add_argument("--server", default="60", help="server outage lengths to try, in seconds")
    parser.add_argument("--deployments", type=int, default=4)
    parser.add_argument(
        "--retry-seconds",
        type=float,
        default=DEFAULT_RETRY_SECONDS,
        help="how long calls wait for Styrmin (STYRMIN_RETRY_SECONDS; default: the agent's and the SDK's)",
    )
    args = parser.parse_args()
    for part, lengths in (("database", args.database), ("server", args.server)):
        survived = 0.0
        for seconds in [float(s) for s in lengths.split(",") if s]:
            with tempfile.TemporaryDirectory(prefix="styrmin-outage-") as scratch:
                outcome = run(
                    Path(scratch),
                    part=part,
                    seconds=seconds,
                    retry_seconds=args.retry_seconds,
                    deployments=args.deployments,
                    log=lambda *parts: print("..", *parts, flush=True),
                )
            for line in report(outcome):
                print(line, flush=True)
            if outcome.nothing_failed:
                survived = max(survived, seconds)
        print(
            f"{part}: longest outage survived with nothing failed: {survived:g} s (target >= {TARGET_SECONDS:g} s)"
        )


if __name__ == "__main__":
    main()
