"""Helm's side of ``action_cost.py --fleet``: N releases of the example chart upgraded at once.

Run by ``action_cost.py`` in a process of its own, so that Helm's Go runtime is not counted as the
stack's. Each release is upgraded from a process of its own, as N ``helm upgrade`` commands would
be: its own Go runtime and its own client-side request rate (client-go shares one limiter between
the configs of a kubeconfig in a process). The processes start and install their releases before
anything is timed. Prints one JSON line: the lone upgrades' seconds and those of the upgrades at once.

    python bench/_helm_fleet.py KUBECONFIG SIZE ROUNDS
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path

from vs_helm import HelmShop

LONE_UPGRADES = 3


def release_process(kubeconfig: Path, tmp: Path, namespace: str, orders: Connection) -> None:
    """Install a release, then upgrade it to each version it is sent, answering with the seconds."""
    release = HelmShop(kubeconfig, tmp, namespace=namespace)
    release.install("1.0.0", migrate=False)
    orders.send("installed")
    while (version := orders.recv()) is not None:
        orders.send(release.upgrade_once(version))
    release.config.uninstall("shop", wait="watcher", timeout=120)
    orders.send("uninstalled")


def main() -> None:
    kubeconfig, size, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="styrmin-helm-fleet-") as tmp:
        ends, processes = [], []
        for index in range(size):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=release_process, args=(kubeconfig, Path(tmp), f"helm-fleet-{index}", theirs)
            )
            process.start()
            ends.append(ours)
            processes.append(process)
        assert all(end.recv() == "installed" for end in ends)

        def upgrade(index: int, version: str) -> float:
            ends[index].send(version)
            seconds: float = ends[index].recv()
            return seconds

        lone = [upgrade(0, f"2.0.{i}") for i in range(LONE_UPGRADES)]
        together: list[float] = []
        for index in range(rounds):
            for end in ends:  # all asked before any answer is read
                end.send(f"3.0.{index}")
            together.extend(end.recv() for end in ends)
        # Gone before the benchmark goes on to measure the idle stack.
        for end in ends:
            end.send(None)
        assert all(end.recv() == "uninstalled" for end in ends)
        for process in processes:
            process.join()
    print(json.dumps({"lone": lone, "together": together}))


if __name__ == "__main__":
    main()
