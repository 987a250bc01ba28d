"""Benchmark: `styrmin up` itself at rest, on its first start and after a restart on the same data dir.

Runs ``python -m styrmin_backend.cli up`` as a user would (its own process tree, a temporary data
dir, no deployment), waits until it answers and its agent's fork server runs, lets it settle, then
prints for each start, beside the issue's targets (issue 23): the memory of its whole process tree
(PSS of every process, and each process's share) and its CPU over an idle window as a share of one
core. A first start differs from a restart: it makes the databases, which loads migration code into
the processes that migrate. After the restart it works as an operator would, then rests and is
measured again: it creates a deployment of the example driver and upgrades it ``--upgrades`` times
(default 5; each runs the driver's upgrade action, Helm and a Job), since what a process loads and
keeps while it works (Helm, the chart's objects, the action's code) is held at rest too. The
example's own processes, which the local cluster runs for its pods, count in the whole tree's
figure; the line after it says how much of it they are.

    uv run python bench/up_idle.py [--idle-seconds 30] [--settle-seconds 10] [--upgrades 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _figures import command_line, cpu_seconds, free_port, process_tree, tree_pss_mb
from action_cost import IDLE_CPU_TARGET, IDLE_PSS_TARGET_MB, verdict

START_SECONDS = 300


def work(url: str, data_dir: Path, upgrades: int) -> None:
    """Create a deployment of the example driver and upgrade it ``upgrades`` times, as an operator."""
    import styrmin

    password = (data_dir / "admin-password.txt").read_text().strip()
    with styrmin.Client(url=url) as client:
        client.login("admin", password)
        driver = client.drivers.list()[0]
        changes = [
            client.deployments.create(
                "shop", namespace="shop", driver=driver.name, driver_version=driver.version
            )
        ]
        for index in range(upgrades):
            task = changes[-1].task
            assert task is not None
            ended = client.tasks.wait(task.id, timeout=300)
            if ended.status != styrmin.TaskStatus.SUCCEEDED:
                raise SystemExit(
                    f"task {ended.id} ({ended.type.value}) ended {ended.status.value}: {ended.error}"
                )
            changes.append(client.deployments.upgrade("shop", app_version=f"9.{index + 1}.0"))
        task = changes[-1].task
        assert task is not None
        client.tasks.wait(task.id, timeout=300)


def measure(data_dir: Path, label: str, args: argparse.Namespace, *, upgrades: int = 0) -> None:
    port = free_port()
    log = data_dir.parent / f"up-{label.replace(' ', '-')}.log"
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "styrmin_backend.cli", "up", "--port", str(port)],
            env={**os.environ, "STYRMIN_DATA_DIR": str(data_dir), "NO_COLOR": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            forking = any("agent.prefect._process" in command_line(pid) for pid in process_tree(process.pid))
            try:
                if forking and httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None:
                raise SystemExit(f"styrmin up ended ({process.returncode}):\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        else:
            raise SystemExit(f"styrmin up did not get ready in {START_SECONDS} s:\n{log.read_text()[-3000:]}")
        ready = time.monotonic() - started
        if upgrades:
            work(f"http://127.0.0.1:{port}", data_dir, upgrades)
            label = f"{label}, after a create and {upgrades} upgrades"
        time.sleep(args.settle_seconds)
        before = sum(map(cpu_seconds, process_tree(process.pid)))
        time.sleep(args.idle_seconds)
        share = (sum(map(cpu_seconds, process_tree(process.pid))) - before) / args.idle_seconds
        total, each = tree_pss_mb(process.pid)
        one, five, _ = os.getloadavg()
        print(f"\n{label}: ready in {ready:.1f} s (load average {one:.2f}, {five:.2f} over 1 and 5 min)")
        print(
            f"  idle CPU: {100 * share:.1f}% of a core over {args.idle_seconds:g} s"
            f"   (target <= {100 * IDLE_CPU_TARGET:g}%: {verdict(share <= IDLE_CPU_TARGET)})"
        )
        print(
            f"  memory: {total:.0f} MB PSS in {len(each)} processes"
            f"   (target <= {IDLE_PSS_TARGET_MB} MB: {verdict(total <= IDLE_PSS_TARGET_MB)})"
        )
        for mb, command in each:
            print(f"    {mb:6.0f} MB  {command}")
        applications = applications_pss_mb(process.pid)
        if applications:
            print(
                f"  of it, the applications the local cluster runs: {sum(applications):.0f} MB in"
                f" {len(applications)} processes; Styrmin's own processes: {total - sum(applications):.0f} MB"
            )
    finally:
        process.terminate()
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def applications_pss_mb(root: int) -> list[float]:
    """The PSS of each process that the local cluster below ``root`` runs for the deployments' pods:
    the applications', not Styrmin's."""
    clusters = [pid for pid in process_tree(root) if "styrmin_localcluster" in command_line(pid)]
    return [
        mb
        for cluster in clusters
        for mb, command in tree_pss_mb(cluster)[1]
        if "styrmin_localcluster" not in command
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--settle-seconds", type=float, default=10)
    parser.add_argument("--upgrades", type=int, default=5, help="upgrades before the last measure (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="styrmin-up-idle-") as tmp:
        data_dir = Path(tmp) / "data"
        measure(data_dir, "first start", args)
        measure(data_dir, "after a restart", args)
        if args.upgrades:
            measure(data_dir, "after another restart", args, upgrades=args.upgrades)


if __name__ == "__main__":
    main()
