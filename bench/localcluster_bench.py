"""Benchmarks of the embedded local cluster.

Figures (medians unless said; one line each, with the target beside it):
  - list latency of 1,000 pods (full JSON, kubectl's Table, a label selector matching 10, lightkube decoding);
  - Job creation to its process starting (target <= 150 ms), for a shell and for Python's first line;
  - the caller's event-loop lag while the cluster works, in a subprocess (default) and in a thread.

Run: .venv/bin/python bench/localcluster_bench.py [--pods 1000] [--jobs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from _figures import percentile
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Pod

from styrmin_localcluster import LocalCluster

CATALOG = """apiVersion: localcluster.styrmin.io/v1
kind: ImageCatalog
images:
  - name: bench/idle
    run: placeholder
  - name: bench/shell
    entrypoint: ["/bin/sh", "-c"]
    run: process
  - name: bench/python
    entrypoint: ["{python}", "-c"]
    run: process
"""
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def http_client(kubeconfig: Path) -> httpx.Client:
    """An HTTP client with the kubeconfig's address, CA and token (the cluster's only way in)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    token = config["users"][0]["user"]["token"]
    return httpx.Client(
        base_url=cluster["server"], verify=context, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def _line(figure: str, values: list[float], target: str = "") -> None:
    print(
        f"{figure:<58} p50 {statistics.median(values) * 1000:7.1f} ms   p99 {percentile(values, 0.99) * 1000:7.1f} ms"
        + (f"   target {target}" if target else "")
    )


def _timed(call: object, rounds: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        call()  # type: ignore[operator]
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return samples


def _pod(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{index:04d}", "labels": {"app": "bench", "group": str(index % 100)}},
        "spec": {
            "containers": [
                {"name": "main", "image": "bench/idle:1", "env": [{"name": "INDEX", "value": str(index)}]}
            ]
        },
    }


def bench_list(http: httpx.Client, kubeconfig: Path, pods: int) -> None:
    http.post("/api/v1/namespaces", json={"metadata": {"name": "bench-list"}}).raise_for_status()
    for index in range(pods):
        http.post("/api/v1/namespaces/bench-list/pods", json=_pod(index)).raise_for_status()
    path = "/api/v1/namespaces/bench-list/pods"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        items = http.get(path).json()["items"]
        if sum(1 for p in items if p.get("status", {}).get("phase") == "Running") == pods:
            break
        time.sleep(0.2)
    size = len(http.get(path).content)
    print(f"{pods} pods listed: {size / 1e6:.1f} MB of JSON per full list")
    _line(f"list {pods} pods, JSON", _timed(lambda: http.get(path).content, 30), "<= 100 ms")
    _line(
        f"list {pods} pods, kubectl Table",
        _timed(lambda: http.get(path, headers={"Accept": TABLE}).content, 30),
    )
    _line(
        f"list {pods} pods, labelSelector matching {pods // 100}",
        _timed(lambda: http.get(path, params={"labelSelector": "group=7"}).content, 30),
    )
    _line(
        f"list {pods} pods, limit=500 (first page)",
        _timed(lambda: http.get(path, params={"limit": "500"}).content, 30),
    )
    client = Client(KubeConfig.from_file(kubeconfig))
    _line(
        f"list {pods} pods through lightkube (client decoding)",
        _timed(lambda: list(client.list(Pod, namespace="bench-list")), 10),
    )
    client.close()


def bench_job_start(http: httpx.Client, data_dir: Path, jobs: int) -> None:
    http.post("/api/v1/namespaces", json={"metadata": {"name": "bench-jobs"}}).raise_for_status()
    marks = data_dir / "data"
    for image, script in (
        ("bench/shell:1", 'date +%s.%N > "$LOCALCLUSTER_DATA_DIR/$HOSTNAME"'),
        (
            "bench/python:1",
            "import os, time; open(os.path.join(os.environ['LOCALCLUSTER_DATA_DIR'], "
            "os.environ['HOSTNAME']), 'w').write(repr(time.time()))",
        ),
    ):
        samples = []
        for index in range(jobs + 3):
            name = f"{image.split('/')[1].split(':')[0]}-{index}"
            body = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": image, "args": [script]}],
                        }
                    },
                },
            }
            created = time.time()
            http.post("/apis/batch/v1/namespaces/bench-jobs/jobs", json=body).raise_for_status()
            pods: list[dict[str, Any]] = []
            deadline = time.monotonic() + 30
            while not pods and time.monotonic() < deadline:
                pods = http.get(
                    "/api/v1/namespaces/bench-jobs/pods", params={"labelSelector": f"job-name={name}"}
                ).json()["items"]
            mark = marks / pods[0]["metadata"]["name"]
            while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.002)
            started = float(mark.read_text())
            if index >= 3:
                samples.append(started - created)
            http.delete(
                f"/apis/batch/v1/namespaces/bench-jobs/jobs/{name}",
                params={"propagationPolicy": "Background"},
            )
        what = "a shell's first command" if "shell" in image else "Python's first line"
        _line(f"Job creation to {what}", samples, "<= 150 ms" if "shell" in image else "")


_LOAD = """
import sys
sys.path.insert(0, sys.argv[2])
from localcluster_bench import http_client
from pathlib import Path
pods = int(sys.argv[3])
with http_client(Path(sys.argv[1])) as http:
    http.post("/api/v1/namespaces", json={"metadata": {"name": "lag"}}).raise_for_status()
    for index in range(pods):
        http.post("/api/v1/namespaces/lag/pods", json={"metadata": {"name": f"p{index}"},
                  "spec": {"containers": [{"name": "m", "image": "bench/idle:1"}]}}).raise_for_status()
    for _ in range(10):
        http.get("/api/v1/namespaces/lag/pods").content
"""


async def _loop_lag_while_running(argv: list[str]) -> list[float]:
    """Delays of a 10 ms timer in this event loop while another process loads the cluster."""
    lags = []
    load = await asyncio.create_subprocess_exec(*argv)
    while load.returncode is None:
        started = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append(time.perf_counter() - started - 0.01)
    await load.wait()
    return lags


def bench_loop_lag(root: Path, catalog: Path, pods: int) -> None:
    """Why the cluster runs in a subprocess: in a thread, its work holds up the caller's event loop."""
    bench_dir = str(Path(__file__).resolve().parent)
    for in_process in (False, True):
        with LocalCluster(root / f"lag-{in_process}", [catalog], in_process=in_process) as cluster:
            argv = [sys.executable, "-c", _LOAD, str(cluster.kubeconfig_path), bench_dir, str(pods)]
            lags = asyncio.run(_loop_lag_while_running(argv))
            where = "a thread of the caller" if in_process else "a subprocess (default)"
            _line(f"caller's event-loop lag, cluster in {where}", lags)
            print(f"{'':58} max {max(lags) * 1000:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="localcluster-bench-") as temporary:
        root = Path(temporary)
        catalog = root / "catalog"
        catalog.mkdir()
        (catalog / "bench.yaml").write_text(CATALOG)
        started = time.perf_counter()
        with LocalCluster(root / "cluster", [catalog]) as cluster:
            print(f"cluster started in {time.perf_counter() - started:.2f} s (subprocess)")
            with http_client(cluster.kubeconfig_path) as http:
                bench_job_start(http, cluster.data_dir, args.jobs)
                bench_list(http, cluster.kubeconfig_path, args.pods)
        bench_loop_lag(root, catalog, args.pods)


if __name__ == "__main__":
    main()
