"""What the benchmark scripts share: percentiles, a free port, `styrmin server` on loopback, requests
and upgrades timed from a process of their own, the memory and CPU of a process tree read from
``/proc``, and how fast the machine runs Python at the moment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
from cryptography.fernet import Fernet

_TIMED_GETS = """
import json, sys, time
import httpx
url, path, count, headers, cookies = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
seconds = []
with httpx.Client(base_url=url, headers=headers, cookies=cookies, timeout=60) as client:
    for _ in range(count):
        started = time.perf_counter()
        response = client.get(path)
        seconds.append(time.perf_counter() - started)
        if response.status_code != 200:
            sys.exit(f"GET {path} answered {response.status_code}")
print(json.dumps(seconds))
"""


REFERENCE_LOOP_MS = 40.0
"""CPU milliseconds :func:`python_loop_ms` took on a python-svc machine (2 cores) at its fastest seen
(2026-12-06; 39-43 ms in most readings there, 70-92 ms in others a few seconds apart)."""


def _fixed_python_work() -> int:
    counts: dict[int, int] = {}
    for number in range(200_000):
        counts[number % 1000] = counts.get(number % 1000, 0) + number
        str(number)
    return len(counts)


def python_loop_ms() -> float:
    """CPU milliseconds of this thread for a fixed piece of pure Python work (the less of two tries).

    The same work took from 39 to 92 ms of CPU on one machine within a minute (a virtual machine's
    core is not always as fast), and every part of the stack slowed down with it. A CPU figure is
    read beside this, taken just before and after it, to tell the code's cost from the machine's
    speed of the moment: a figure times ``REFERENCE_LOOP_MS / python_loop_ms()`` is what it would be
    at the reference speed (an estimate; the loop is Python only, the stack also waits on the kernel).
    """
    best = float("inf")
    for _ in range(2):
        started = time.thread_time()
        _fixed_python_work()
        best = min(best, time.thread_time() - started)
    return best * 1000


def percentile(values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def timed_gets(
    url: str, path: str, count: int, headers: Mapping[str, str], cookies: Mapping[str, str]
) -> list[float]:
    """The seconds each of ``count`` GETs of ``path`` took, one after another, from a process of their
    own (as a browser's would be: a client in the server's process would take turns with it for the
    interpreter). Raises CalledProcessError when one is not answered 200."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _TIMED_GETS,
            url,
            path,
            str(count),
            json.dumps(dict(headers)),
            json.dumps(dict(cookies)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    seconds: list[float] = json.loads(done.stdout)
    return seconds


_OPERATOR = """
import json, sys, time
import styrmin
client = styrmin.Client(sys.argv[1], token=sys.argv[2], timeout=600)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    name, version, interval, field = json.loads(line)
    started = time.perf_counter()
    change = client.deployments.upgrade(name, **{field: version})
    task = client.tasks.wait(change.task.id, interval=interval, timeout=600)
    print(json.dumps({"seconds": time.perf_counter() - started, "status": task.status.value, "task": change.task.id}), flush=True)
"""


class Operator:
    """An operator's script in a process of its own: it upgrades a deployment and waits for the task, on
    request, as ``styrminctl upgrade --wait`` would. A client in the stack's own process would take turns
    with the server for the interpreter, and its CPU would count as the stack's."""

    def __init__(self, url: str, token: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _OPERATOR, url, token],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._answer()  # imported and ready: its start is not timed

    @property
    def pid(self) -> int:
        return self.process.pid

    def upgrade(self, name: str, version: str, interval: float = 1.0, *, driver: bool = False) -> float:
        """Seconds from the upgrade request to the task's end; raises unless the task succeeded.
        ``version`` is the application's, or with ``driver`` the driver's."""
        assert self.process.stdin is not None
        field = "driver_version" if driver else "app_version"
        self.process.stdin.write(json.dumps([name, version, interval, field]) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        if answer["status"] != "succeeded":
            raise RuntimeError(
                f"the upgrade of {name} to {version} ended {answer['status']} (task {answer['task']})"
            )
        seconds: float = answer["seconds"]
        return seconds

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the operator's process exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


OPERATORS: set[int] = set()
"""The processes of the benchmark's own clients (``Operator``): not the stack's, never counted as it."""


@contextmanager
def operators(url: str, token: str, count: int) -> Iterator[list[Operator]]:
    """``count`` operators' processes for the stack at ``url``, as operators scripting upgrades run
    them (see ``Operator``); ``cpu_by_role`` and ``tree_pss_mb`` leave them out (``OPERATORS``)."""
    made: list[Operator] = []
    try:
        for _ in range(count):
            made.append(Operator(url, token))
            OPERATORS.add(made[-1].pid)
        yield made
    finally:
        for operator in made:
            operator.close()
            OPERATORS.discard(operator.pid)


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def hold_free_ports(count: int) -> list[socket.socket]:
    """``count`` sockets bound to free loopback ports, held until closed: a process that picks a free
    port meanwhile (the Prefect server, the local cluster) cannot pick one of them."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
    return held


BENCH_SECRET_KEY = Fernet.generate_key().decode()
"""The key of secret values for the servers of one bench run (a server on PostgreSQL needs one)."""


@contextmanager
def styrmin_server(env: Mapping[str, str]) -> Iterator[str]:
    """``styrmin server`` (one process, as in production) on a free loopback port; yields its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", "server", "--port", str(port)],
        env={**os.environ, "STYRMIN_LOG_LEVEL": "WARNING", "STYRMIN_SECRET_KEY": BENCH_SECRET_KEY, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts it slowly
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a request still keeps it busy
            process.kill()
            process.wait()


_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(root: int, outside: Collection[int] = ()) -> list[int]:
    """``root`` and every process below it, but for those of ``outside`` (and the processes below them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in outside:
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def command_line(pid: int) -> str:
    """The command line of process ``pid`` (empty once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return " ".join(cmdline.read().replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        return ""


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid``, its ended children that it waited for included."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime (fields 14-17 of proc(5); here shifted by the two cut off)
    return sum(int(value) for value in fields[11:15]) / _TICKS


def tree_pss_mb(root: int, outside: Collection[int] = ()) -> tuple[float, list[tuple[float, str]]]:
    """The PSS of ``root`` and all below it but ``outside``, in MB, and each process's (MB, command line)."""
    each = []
    for pid in process_tree(root, outside):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                kb = next(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
        each.append((kb / 1024, command_line(pid)[:90]))
    return sum(mb for mb, _ in each), sorted(each, reverse=True)


ROLES = ("server and agent", "Prefect server", "fork server and actions", "local cluster", "applications")
"""The parts of the stack ``cpu_by_role`` counts apart; "server and agent" is the benchmark's own process
(where the server runs) and the agent's process."""


def stack_role(pid: int) -> str:
    """Which part of the stack a process below the benchmark is, by its command line."""
    if pid == os.getpid():
        return "server and agent"
    command = command_line(pid)
    if "agent.prefect._process" in command:
        return "fork server and actions"
    if " -m styrmin_backend.agent " in f" {command} ":
        return "server and agent"
    if "runpy" in command:
        return "Prefect server"
    if "styrmin_localcluster" in command:
        return "local cluster"
    return "applications"


_MEASURING: list[float] = [0.0]
"""CPU seconds this process spent in ``cpu_by_role`` so far: the benchmarks run in the stack's own
process, and reading ``/proc`` for every process costs about 3 ms, twice per action measured."""


def cpu_by_role(outside: Collection[int] = ()) -> dict[str, float]:
    """CPU seconds of this process and all below it but ``outside``, by role (``ROLES``), the ended
    processes that were waited for included, and this process's less what these readings cost it."""
    started = time.thread_time()
    own = os.getpid()
    seconds = dict.fromkeys(ROLES, 0.0)
    seconds[stack_role(own)] = cpu_seconds(own) - _MEASURING[0]  # read first: no reading since counts
    for pid in process_tree(own, outside):
        if pid != own:
            seconds[stack_role(pid)] += cpu_seconds(pid)
    _MEASURING[0] += time.thread_time() - started
    return seconds
