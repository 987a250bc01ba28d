"""Benchmark: the agent's overhead per action run, from the request to the task's end.

Runs `styrmin up` (server, embedded local cluster, Prefect server, agent) in a temporary data dir,
installs the example chart with a driver whose actions do nothing, then times upgrades to new driver
versions whose hooks hold empty actions (an upgrade with a core action runs no Helm upgrade):

- one empty action: an upgrade whose only step is "Run the upgrade hook" (target <= 0.5 s);
- three empty hook steps: pre, core and post (target <= 1.5 s).

    uv run python bench/agent_overhead.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from _figures import free_port

from styrmin_backend.drivers import pack_driver_folder

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drivers" / "shop"
ACTIONS = """
from prefect import flow

from styrmin_backend.actions import GlobalContext


@flow
async def empty(context: GlobalContext) -> None:
    return None
"""


def driver(tmp: Path, version: str, modes: list[str]) -> bytes:
    folder = tmp / f"shop-{version}"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "actions.py").write_text(ACTIONS)
    spec = yaml.safe_load((folder / "driver.styrmin.yml").read_text())
    spec["metadata"]["version"] = version
    spec["spec"]["actions"] = [
        {"name": f"empty_{mode}", "hook": "upgrade", "mode": mode, "location": "actions.py::empty"}
        for mode in modes
    ]
    (folder / "driver.styrmin.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return pack_driver_folder(folder)


def wait(http: httpx.Client, task_id: int, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task: dict[str, Any] = http.get(f"/api/v1/tasks/{task_id}").json()
        if task["status"] in ("succeeded", "failed"):
            return task
        time.sleep(0.01)
    raise TimeoutError(f"task {task_id} did not end")


def timed_upgrade(http: httpx.Client, tmp: Path, version: str, modes: list[str]) -> float:
    response = http.post(
        "/api/v1/drivers", content=driver(tmp, version, modes), headers={"Content-Type": "application/gzip"}
    )
    response.raise_for_status()
    started = time.perf_counter()
    task_id = http.post("/api/v1/deployments/bench/upgrade", json={"driver_version": version}).json()["task"][
        "id"
    ]
    task = wait(http, task_id)
    elapsed = time.perf_counter() - started
    assert task["status"] == "succeeded", task
    assert len(task["steps"]) == len(modes), task["steps"]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="styrmin-bench-agent-"))
    port = free_port()
    env = {
        **os.environ,
        "STYRMIN_DATA_DIR": str(tmp / "data"),
        "STYRMIN_ADMIN_PASSWORD": "bench-password",
        "STYRMIN_LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "styrmin_backend.cli", "up", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        deadline = time.monotonic() + 180
        while True:
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        token = http.post(
            "/api/v1/auth/login", json={"username": "admin", "password": "bench-password"}
        ).json()["token"]
        http.headers["Authorization"] = f"Bearer {token}"
        base = driver(tmp, "100.0.0", [])
        http.post(
            "/api/v1/drivers", content=base, headers={"Content-Type": "application/gzip"}
        ).raise_for_status()
        created = http.post(
            "/api/v1/deployments",
            json={"name": "bench", "namespace": "bench", "driver": "shop", "driver_version": "100.0.0"},
        ).json()
        assert wait(http, created["task"]["id"])["status"] == "succeeded"
        time.sleep(20)  # the agent fills its pool of pre-started action processes after it starts
        one, three = [], []
        for round_ in range(args.rounds + 1):  # the first round warms up
            single = timed_upgrade(http, tmp, f"100.{round_ + 1}.0", ["core"])
            triple = timed_upgrade(http, tmp, f"100.{round_ + 1}.1", ["pre", "core", "post"])
            if round_:
                one.append(single)
                three.append(triple)
            time.sleep(5)  # operators do not upgrade several times a second: let the pool refill
        print(
            f"one empty action, request to task end: p50 {statistics.median(one):.3f} s, max {max(one):.3f} s   (target <= 0.5 s: {'met' if statistics.median(one) <= 0.5 else 'NOT met'})"
        )
        print(
            f"upgrade with three empty hook steps: p50 {statistics.median(three):.3f} s, max {max(three):.3f} s   (target <= 1.5 s: {'met' if statistics.median(three) <= 1.5 else 'NOT met'})"
        )
    finally:
        process.terminate()
        process.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
