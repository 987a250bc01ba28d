"""Benchmark: what an action costs the whole stack, and what the stack costs idle.

Starts the stack ``styrmin up`` runs (server, agent, local cluster, Prefect server) in this process,
with a driver whose only action is an empty upgrade core action, then prints, each beside its target:

- 20 upgrades one after another, each running only the empty action: request to end (median, max),
  and the CPU (user + system, read from ``/proc``) of every process of the stack per action,
  including whatever replaces what an action used up, and that CPU by part of the stack (this
  process's server and agent, the Prefect server, the fork server with its actions' processes, the
  local cluster, the applications it runs);
- the idle stack: its CPU over 30 s as a share of one core, and its memory (PSS of every process);
- ``--deployments N`` (default 0; the issue's figure is 200): N more deployments, their components
  stopped, then the idle CPU again and the p99 of the deployments page and ``GET /api/v1/deployments``
  (200 requests each, from a process of their own, as a browser is);
- ``--fleet N`` (default 20): N deployments upgraded at once, ``--fleet-rounds`` times (default 3);
  each round's time and CPU (per upgrade, and how many cores were busy), and the median beside a
  lone upgrade's; then the peer: as many Helm releases of the same chart upgraded at once
  (``_helm_fleet.py``), beside a lone Helm upgrade.

The timed upgrades are requested and waited for from processes of their own (``_figures.Operator``), as
an operator's script would: their CPU and memory are not counted as the stack's.

    uv run python bench/action_cost.py [--actions 20] [--idle-seconds 30] [--deployments 200] [--fleet 20]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from _figures import (
    OPERATORS,
    REFERENCE_LOOP_MS,
    ROLES,
    Operator,
    cpu_by_role,
    operators,
    percentile,
    python_loop_ms,
    timed_gets,
    tree_pss_mb,
)

import styrmin
from styrmin_backend.testing import StyrminStack

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drivers" / "shop"
POLL_SECONDS = 0.02

CPU_PER_ACTION_TARGET = 0.15
REQUEST_TO_END_TARGET = 0.3
IDLE_CPU_TARGET = 0.03
IDLE_PSS_TARGET_MB = 500
IDLE_CPU_WITH_MANY_TARGET = 0.05
PAGE_P99_TARGET = 0.1
FLEET_RATIO_TARGET = 2.0
PAGE_REQUESTS = 200
"""Requests of each list timed: enough that the p99 is not the single slowest one."""

EMPTY_ACTIONS = """from prefect import flow

from styrmin_backend.actions import GlobalContext


@flow
async def empty(context: GlobalContext) -> None:
    return None
"""


def stack_cpu_by_role() -> dict[str, float]:
    """CPU seconds of this process and all below it, by role (the operators' processes left out)."""
    return cpu_by_role(OPERATORS)


def stack_cpu_seconds() -> float:
    """CPU seconds of this process and all below it, the ended ones that were waited for included."""
    return sum(stack_cpu_by_role().values())


def stack_pss_mb() -> tuple[float, list[tuple[float, str]]]:
    """The PSS of this process and all below it, in MB, and each process's (MB, command line)."""
    return tree_pss_mb(os.getpid(), OPERATORS)


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def empty_action_driver(tmp: Path, version: str) -> Path:
    folder = tmp / f"shop-empty-{version}"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "actions.py").write_text(EMPTY_ACTIONS)
    spec = yaml.safe_load((folder / "driver.styrmin.yml").read_text())
    spec["metadata"]["version"] = version
    spec["spec"]["actions"] = [
        {"name": "empty", "hook": "upgrade", "mode": "core", "location": "actions.py::empty"}
    ]
    (folder / "driver.styrmin.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


def idle(seconds: float) -> float:
    """The stack's CPU over ``seconds`` of rest, as a share of one core."""
    before = stack_cpu_seconds()
    time.sleep(seconds)
    return (stack_cpu_seconds() - before) / seconds


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min), {os.cpu_count()} cores"


def run(args: argparse.Namespace, tmp: Path) -> None:
    t0 = time.perf_counter()
    # The agent's pause after a failed claim as `styrmin up` has it (the test harness shortens it).
    with StyrminStack.start(
        tmp / "data", [EXAMPLE / "catalog"], agent_options={"poll_seconds": 0.5}
    ) as stack:
        print(f"stack ready in {time.perf_counter() - t0:.1f} s; {load()}", flush=True)
        stack.client.drivers.push(empty_action_driver(tmp, "100.0.0"))
        task = stack.create("empty", driver="shop", driver_version="100.0.0", app_version="1.0.0")
        assert task.status == styrmin.TaskStatus.SUCCEEDED, task
        # Closed once everything is measured: the CPU of an ended child counts as its parent's.
        assert stack.client.token is not None
        with operators(stack.url, stack.client.token, 1 + args.fleet) as (operator, *fleet_operators):
            one_after_another(args, operator)
            if args.fleet:
                fleet(stack, fleet_operators, args.fleet_rounds)
            if args.deployments:
                many(stack, args.deployments, args.idle_seconds)


def one_after_another(args: argparse.Namespace, operator: Operator) -> None:
    """The empty actions one after another, then the idle stack."""
    for warm in range(2):
        operator.upgrade("empty", f"0.9.{warm}", POLL_SECONDS)
    time.sleep(3)  # whatever the warm-up left running settles

    times, cpus, loops = [], [], []
    by_role: dict[str, list[float]] = {role: [] for role in ROLES}
    for index in range(args.actions):
        loop_before = python_loop_ms()  # outside the action's window: not counted as the stack's
        before_each = stack_cpu_by_role()
        before = sum(before_each.values())
        times.append(operator.upgrade("empty", f"1.0.{index + 1}", POLL_SECONDS))
        after_each = stack_cpu_by_role()
        cpus.append(sum(after_each.values()) - before)
        loops.append((loop_before + python_loop_ms()) / 2)
        for role in ROLES:
            by_role[role].append(after_each[role] - before_each[role])
    time.sleep(3)
    settled = stack_cpu_seconds()
    total_cpu = sum(cpus)
    print(f"\n{args.actions} empty actions one after another ({load()}):")
    median_time = statistics.median(times)
    print(
        f"  request to end: median {median_time:.3f} s, min {min(times):.3f}, max {max(times):.3f}"
        f"   (target <= {REQUEST_TO_END_TARGET} s: {verdict(median_time <= REQUEST_TO_END_TARGET)})"
    )
    median_cpu = statistics.median(cpus)
    print(
        f"  CPU of the stack per action: median {median_cpu:.3f} s, mean {total_cpu / len(cpus):.3f} s, "
        f"max {max(cpus):.3f}   (target <= {CPU_PER_ACTION_TARGET} s: "
        f"{verdict(median_cpu <= CPU_PER_ACTION_TARGET)})"
    )
    print(
        "    by part (mean per action): "
        + ", ".join(f"{role} {statistics.fmean(by_role[role]):.3f} s" for role in ROLES)
    )
    print(f"  CPU in the 3 s after the last one (refills): {settled - before - cpus[-1]:.3f} s")
    scaled = [cpu * REFERENCE_LOOP_MS / loop for cpu, loop in zip(cpus, loops, strict=True)]
    print(
        f"  machine speed: a fixed Python loop took {min(loops):.0f}-{max(loops):.0f} ms of CPU around the"
        f" actions (median {statistics.median(loops):.0f} ms; {REFERENCE_LOOP_MS:.0f} ms at the reference"
        " speed, _figures.python_loop_ms)"
    )
    print(
        f"  CPU of the stack per action scaled to the reference speed (an estimate): median"
        f" {statistics.median(scaled):.3f} s, max {max(scaled):.3f}   (target <= {CPU_PER_ACTION_TARGET} s"
        f" at that speed: {verdict(statistics.median(scaled) <= CPU_PER_ACTION_TARGET)})"
    )

    share = idle(args.idle_seconds)
    pss, each = stack_pss_mb()
    print(f"\nidle stack ({load()}):")
    print(
        f"  CPU: {100 * share:.1f}% of a core over {args.idle_seconds:g} s"
        f"   (target <= {100 * IDLE_CPU_TARGET:g}%: {verdict(share <= IDLE_CPU_TARGET)})"
    )
    print(
        f"  memory: {pss:.0f} MB PSS in {len(each)} processes"
        f"   (target <= {IDLE_PSS_TARGET_MB} MB: {verdict(pss <= IDLE_PSS_TARGET_MB)})"
    )
    for mb, command in each:
        print(f"    {mb:6.0f} MB  {command}")


def fleet(stack: StyrminStack, team: list[Operator], rounds: int) -> None:
    size = len(team)
    names = [f"fleet{i}" for i in range(size)]
    with ThreadPoolExecutor(size) as pool:
        for task in pool.map(
            lambda n: stack.create(n, driver="shop", driver_version="100.0.0", app_version="1.0.0"), names
        ):
            assert task.status == styrmin.TaskStatus.SUCCEEDED, task
        lone = [team[0].upgrade(names[0], f"2.0.{i}", POLL_SECONDS) for i in range(3)]
        together: list[float] = []
        for index in range(rounds):
            version = f"3.0.{index}"
            start, wall = stack_cpu_by_role(), time.perf_counter()
            together.extend(
                pool.map(lambda each, n, v=version: each.upgrade(n, v, POLL_SECONDS), team, names)
            )
            end, wall = stack_cpu_by_role(), time.perf_counter() - wall
            parts = {role: end[role] - start[role] for role in ROLES}
            cpu = sum(parts.values())
            print(
                f"  round {index + 1}: {wall:.2f} s, CPU {cpu:.2f} s ({cpu / size:.3f} s per upgrade, "
                f"{cpu / wall:.2f} cores busy; per upgrade: "
                + ", ".join(f"{role} {parts[role] / size:.3f}" for role in ROLES[:3])
                + ")"
            )
    helm_lone, helm_together = helm_fleet(stack, size, rounds)
    lone_median, median = statistics.median(lone), statistics.median(together)
    print(f"\n{size} deployments upgraded at once, {rounds} times ({load()}):")
    print(
        f"  median {median:.2f} s (p90 {percentile(together, 0.9):.2f}), a lone upgrade {lone_median:.2f} s: "
        f"{median / lone_median:.2f}x   (target <= {FLEET_RATIO_TARGET:g}x: "
        f"{verdict(median / lone_median <= FLEET_RATIO_TARGET)})"
    )
    helm_lone_median, helm_median = statistics.median(helm_lone), statistics.median(helm_together)
    print(
        f"  the peer, Helm: {size} releases of the same chart upgraded at once (`helm upgrade --wait`, no"
        f" hook, a process each), median {helm_median:.2f} s (p90 {percentile(helm_together, 0.9):.2f}), a lone upgrade"
        f" {helm_lone_median:.2f} s: {helm_median / helm_lone_median:.2f}x; Styrmin's median at once is"
        f" {median / helm_median:.2f}x Helm's"
    )


def helm_fleet(stack: StyrminStack, size: int, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of Helm's lone upgrades and of its upgrades at once (``_helm_fleet.py``, a process of its
    own), against the stack's local cluster, after Styrmin's rounds."""
    script = Path(__file__).resolve().with_name("_helm_fleet.py")
    kubeconfig = str(stack.cluster.kubeconfig_path)
    done = subprocess.run(
        [sys.executable, str(script), kubeconfig, str(size), str(rounds)],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    figures = json.loads(done.stdout.splitlines()[-1])
    return figures["lone"], figures["together"]


def many(stack: StyrminStack, count: int, idle_seconds: float) -> None:
    import httpx

    names = [f"held{i}" for i in range(count)]
    lock = threading.Lock()
    made = 0

    def create_stopped(name: str) -> None:
        nonlocal made
        task = stack.create(name, driver="shop", driver_version="100.0.0", app_version="1.0.0")
        assert task.status == styrmin.TaskStatus.SUCCEEDED, task
        stopped = stack.client.deployments.stop(name, components=["server", "task-worker"])
        assert stopped.task is not None
        assert stack.client.tasks.wait(stopped.task.id, timeout=600).status == styrmin.TaskStatus.SUCCEEDED
        with lock:
            made += 1

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create_stopped, names))
    time.sleep(5)
    share = idle(idle_seconds)
    print(f"\n{count} more deployments, their components stopped ({load()}):")
    print(
        f"  idle CPU: {100 * share:.1f}% of a core   (target <= {100 * IDLE_CPU_WITH_MANY_TARGET:g}%: "
        f"{verdict(share <= IDLE_CPU_WITH_MANY_TARGET)})"
    )
    http = httpx.Client(base_url=stack.url, timeout=60)
    form = re.search(r'name="csrf_token" value="([^"]+)"', http.get("/login").text)
    assert form is not None, "no CSRF token in the login form"
    signed_in = http.post(
        "/login", data={"username": "admin", "password": stack.admin_password, "csrf_token": form.group(1)}
    )
    assert signed_in.status_code in (200, 303), signed_in.text[:300]
    for label, path in (
        ("deployments page", "/deployments"),
        ("GET /api/v1/deployments", "/api/v1/deployments"),
    ):
        api = path.startswith("/api")
        seconds = timed_gets(
            stack.url,
            path,
            PAGE_REQUESTS,
            {"Authorization": f"Bearer {stack.client.token}"} if api else {},
            {} if api else dict(http.cookies),
        )
        p99 = percentile(seconds, 0.99)
        print(
            f"  {label}: p50 {statistics.median(seconds) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
            f" ({PAGE_REQUESTS} requests from a process of their own)"
            f"   (target <= {PAGE_P99_TARGET * 1000:.0f} ms: {verdict(p99 <= PAGE_P99_TARGET)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--actions", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--deployments", type=int, default=0)
    parser.add_argument("--fleet", type=int, default=20)
    parser.add_argument("--fleet-rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="styrmin-action-cost-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
