"""Benchmark of the execute_commands primitive on the embedded local cluster.

Figures (one line each, target beside it):
  - overhead of execute_commands beyond its command: a `true` command, from the call to its result
    (the Job, its pod's process, the wait and the log read), p50 and p99 (target <= 300 ms);
    beside it, the cluster's own Job creation to a finished pod, for comparison;
  - the tail of a 100 MB log: extra Python memory while it streams (target <= 2 MB) and throughput.

Only the cluster is started: each round runs for a deployment name of its own, so no earlier Job is
deleted and the Styrmin API is not called (STYRMIN_URL points nowhere); the API calls of the
primitive (a note, a failed command's output) are not in these figures.

Run: .venv/bin/python bench/execute_commands.py [--rounds 30] [--log-mb 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from _figures import percentile
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from styrmin_backend.actions import GlobalContext, execute_commands
from styrmin_backend.actions._kube import LightkubeCluster, kube_client
from styrmin_backend.actions._real import wire_real_backend
from styrmin_backend.actions._tail import OutputTail
from styrmin_localcluster import LocalCluster

CATALOG = """apiVersion: localcluster.styrmin.io/v1
kind: ImageCatalog
images:
  - name: bench/shell
    entrypoint: ["/bin/sh", "-c"]
    run: process
"""
NAMESPACE = "bench"


def context(name: str) -> GlobalContext:
    return GlobalContext(
        deployment_id=1,
        deployment_name=name,
        namespace=NAMESPACE,
        cluster_id="local",
        driver_name="bench",
        driver_version="1.0.0",
        current_app_version="1.0.0",
        target_app_version="1.0.0",
        revision=1,
        task_id=1,
        hook_step_id=1,
        hook="upgrade",
        mode="core",
        api_url="http://127.0.0.1:9",
    )


async def overhead(rounds: int) -> list[float]:
    seconds = []
    for index in range(rounds + 3):  # three warm-up rounds
        started = time.perf_counter()
        result = await execute_commands(["true"], image="bench/shell:1", context=context(f"o{index}"))
        elapsed = time.perf_counter() - started
        assert result.exit_code == 0
        if index >= 3:
            seconds.append(elapsed)
    return seconds


async def big_log(megabytes: int) -> tuple[float, int, float]:
    """Seconds of execute_commands for a command printing ``megabytes`` MB, and the tail's read alone."""
    command = [
        "sh",
        "-c",
        f'yes "a line of output of about sixty bytes, as a migration prints" | head -c {megabytes * 1024 * 1024}',
    ]
    started = time.perf_counter()
    result = await execute_commands(command, image="bench/shell:1", context=context("biglog"))
    whole = time.perf_counter() - started
    cluster = LightkubeCluster()
    pod = await cluster.job_pod(NAMESPACE, result.job_name)
    assert pod.name is not None
    tail = OutputTail()
    read_started = time.perf_counter()
    await cluster.read_job_log(NAMESPACE, pod.name, tail)
    read_seconds = time.perf_counter() - read_started
    assert tail.total_bytes == megabytes * 1024 * 1024, tail.total_bytes
    tracemalloc.start()
    await cluster.read_job_log(NAMESPACE, pod.name, OutputTail())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return whole, peak, read_seconds


async def main(rounds: int, log_mb: int) -> None:
    wire_real_backend()  # as an action's process does: the primitives reach the cluster of KUBECONFIG
    await kube_client().apply(
        Namespace(apiVersion="v1", kind="Namespace", metadata=ObjectMeta(name=NAMESPACE))
    )
    seconds = await overhead(rounds)
    p50, p99 = statistics.median(seconds) * 1000, percentile(seconds, 0.99) * 1000
    print(
        f"execute_commands overhead (command `true`, {rounds} rounds): p50 {p50:.0f} ms, p99 {p99:.0f} ms  (target <= 300 ms)"
    )
    whole, peak, read_seconds = await big_log(log_mb)
    print(
        f"tail of a {log_mb} MB log: extra memory while streaming {peak / 1024 / 1024:.2f} MB  (target <= 2 MB)"
    )
    print(
        f"tail of a {log_mb} MB log: read at {log_mb / read_seconds:.0f} MB/s "
        f"({read_seconds:.2f} s); whole execute_commands {whole:.2f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--log-mb", type=int, default=100)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-execute-") as scratch:
        catalog = Path(scratch) / "catalog"
        catalog.mkdir()
        (catalog / "bench.yaml").write_text(CATALOG)
        with LocalCluster(Path(scratch) / "cluster", [catalog]) as cluster:
            os.environ.update(
                {
                    "KUBECONFIG": str(cluster.kubeconfig_path),
                    "STYRMIN_URL": "http://127.0.0.1:9",
                    "STYRMIN_TOKEN": "bench",
                }
            )
            asyncio.run(main(arguments.rounds, arguments.log_mb))
    sys.exit(0)
