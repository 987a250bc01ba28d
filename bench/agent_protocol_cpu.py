"""Benchmark: the server's CPU for each task an agent runs, by request.

Each example upgrade runs four tasks (the upgrade, and the stop, upgrade and start its action asks
for), and every task costs the server the same few requests. This starts `styrmin server` (one
process, SQLite, as `styrmin up` serves) on loopback, stores the example driver and a deployment of
it, and then plays one side of the agent protocol over HTTP, as the agent sends it, for ``--tasks``
stop tasks: an operator asks for the stop, the agent claims it (the first step and the Helm lock come
with the claim), ends it with its last step and the components it saw, asks for the next task and
finds none. The requests go one at a time from this process, so the server's CPU (user and system,
read from ``/proc``) is the server's own.

Prints the server's CPU per task, and by request, beside how fast the machine ran a fixed piece of
Python just before (``_figures.python_loop_ms``): compare code by running this for each, alternately,
on the same machine (``PYTHONPATH`` picks the code the server runs).

    uv run python bench/agent_protocol_cpu.py [--tasks 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from _figures import command_line, cpu_seconds, process_tree, python_loop_ms, styrmin_server

import styrmin
from styrmin_backend.domain.plan import PLAN_VERSION

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drivers" / "shop"
ADMIN_PASSWORD = "bench-admin-password"  # noqa: S105 (a throwaway admin of a throwaway data dir)
COMPONENTS = [
    {
        "name": name,
        "kind": "Deployment",
        "workload": f"shop-{name}",
        "replicas": 1,
        "ready_replicas": 1,
        "images": [f"example.com/shop/{name}:1.0.0"],
    }
    for name in ("server", "task-worker")
]
_Answer = TypeVar("_Answer")
CLAIM = {"lease_seconds": 60, "plan_version": PLAN_VERSION, "helm_lock_lease_seconds": 60}


def _server_pid(url: str) -> int:
    """The `styrmin server` process below this one that serves ``url``."""
    port = url.rsplit(":", 1)[1]
    for pid in process_tree(os.getpid()):
        words = command_line(pid).split()
        if "server" in words and port in words:
            return pid
    raise SystemExit(f"no styrmin server process serves {url}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="styrmin-bench-protocol-"))
    env = {"STYRMIN_DATA_DIR": str(work / "data"), "STYRMIN_ADMIN_PASSWORD": ADMIN_PASSWORD}
    try:
        with styrmin_server(env) as url:
            pid = _server_pid(url)
            operator = styrmin.Client(url, timeout=120)
            operator.login("admin", ADMIN_PASSWORD)
            operator.drivers.push(EXAMPLE)
            key = operator.agents.create("bench-agent", cluster="local").key
            operator.deployments.create(name="shop", namespace="shop", driver="shop", driver_version="1.0.0")
            with httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {key}"}) as agent:
                seconds: dict[str, float] = defaultdict(float)

                def run_task(measure: bool) -> None:
                    def step(label: str, call: Callable[[], _Answer]) -> _Answer:
                        before = cpu_seconds(pid)
                        response = call()
                        if measure:
                            seconds[label] += cpu_seconds(pid) - before
                        return response

                    step(
                        "stop request (operator)", lambda: operator.deployments.stop("shop", ["task-worker"])
                    )
                    claimed = step("claim", lambda: agent.post("/agent/claim", json=CLAIM))
                    assert claimed.status_code == 200, claimed.text
                    body = claimed.json()
                    ended = step(
                        "end",
                        lambda: agent.post(
                            f"/agent/tasks/{body['task']['id']}/end",
                            json={
                                "error": None,
                                "last_step_id": body["first_step"]["id"],
                                "components": COMPONENTS,
                                "release_helm_locks": True,
                            },
                        ),
                    )
                    assert ended.status_code == 200 and ended.json()["status"] == "succeeded", ended.text
                    empty = step("claim finding none", lambda: agent.post("/agent/claim", json=CLAIM))
                    assert empty.status_code == 204, empty.text

                # The deployment's create task first: the stops wait for nothing then.
                created = agent.post("/agent/claim", json=CLAIM).json()
                agent.post(
                    f"/agent/tasks/{created['task']['id']}/end",
                    json={
                        "error": None,
                        "last_step_id": created["first_step"]["id"],
                        "release_helm_locks": True,
                    },
                ).raise_for_status()
                for _ in range(30):
                    run_task(measure=False)
                loop_ms = python_loop_ms()
                started = time.perf_counter()
                for _ in range(args.tasks):
                    run_task(measure=True)
                elapsed = time.perf_counter() - started
            operator.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = sum(seconds.values())
    print(f"server CPU per task, over {args.tasks} stop tasks: {1000 * total / args.tasks:.2f} ms")
    for label, value in seconds.items():
        print(f"  {label:26s} {1000 * value / args.tasks:6.2f} ms")
    print(
        f"wall per task {1000 * elapsed / args.tasks:.1f} ms; the fixed Python loop took {loop_ms:.0f} ms just before"
    )


if __name__ == "__main__":
    main()
