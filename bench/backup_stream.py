"""Benchmark of moving a backup's files: a 200 MB backup and its restore through the agent's storage code.

This is the path every backup takes after the driver's Job wrote its files and before a restore's Job
reads them: the "Record the backup's files" step (hash every file; with a bucket, stream it up in
multipart parts) and the "Check the backup's files" step (with a bucket, stream it back down; hash and
compare). Figures, one line each, target beside it:
  - folder location: backup (hash) and restore check, MB/s;
  - S3-compatible bucket (moto's server, in a process of its own on 127.0.0.1): upload and download,
    MB/s;
  - for each, the peak extra memory of this process while it runs: RSS above its level before (sampled
    every 5 ms) and Python allocations (tracemalloc). Target: <= 64 MB whatever the backup's size.

Median of --rounds rounds after one warm-up round. moto keeps objects in its own process's memory,
which is not counted here (it is the bucket, not Styrmin).

Run: .venv/bin/python bench/backup_stream.py [--mb 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx
from _figures import free_port

from styrmin_backend.agent.backup_storage import BackupFolder, S3Credentials, S3Storage
from styrmin_backend.domain.backup_locations import check_location

TARGET_MB = 64
KEY = "bench/backup-1"


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(work: Callable[[], object]) -> tuple[float, float, float]:
    """Seconds, peak extra RSS (MB) and peak Python allocations (MB) while ``work`` runs."""
    base = _rss()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    tracemalloc.start()
    sampler.start()
    started = time.perf_counter()
    try:
        work()
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
        _, python_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return elapsed, (peak[0] - base) / 1e6, python_peak / 1e6


def write_backup(folder: Path, mb: int) -> None:
    """The files a driver's Job would leave: one big database and a small version file."""
    folder.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(1 << 20)
    with (folder / "shop.sqlite3").open("wb") as out:
        for _ in range(mb):
            out.write(chunk)
    (folder / "schema-version").write_text("1.0.0\n")


def moto_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.terminate()
    raise SystemExit("moto's server did not start within 60 s")


def report(name: str, mb: int, rounds: list[tuple[float, float, float]]) -> None:
    seconds = statistics.median(r[0] for r in rounds)
    rss = statistics.median(r[1] for r in rounds)
    python = statistics.median(r[2] for r in rounds)
    verdict = "ok" if max(rss, python) <= TARGET_MB else "OVER"
    print(
        f"{name:<28} {mb / seconds:8.1f} MB/s   peak extra RSS {rss:6.1f} MB, Python {python:6.1f} MB"
        f"   (target <= {TARGET_MB} MB: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        folder = BackupFolder(root / "folder")
        write_backup(folder.staging(KEY), args.mb)
        recorded = folder.publish(KEY)
        results: dict[str, list[tuple[float, float, float]]] = {}
        for round_ in range(args.rounds + 1):
            backup = measure(lambda: folder.publish(KEY))
            restore = measure(lambda: folder.fetch(KEY, recorded))
            if round_:
                results.setdefault("folder: back up (record)", []).append(backup)
                results.setdefault("folder: restore (check)", []).append(restore)
        process, url = moto_server()
        try:
            location = check_location(
                "s3",
                bucket="bench",
                prefix="styrmin",
                endpoint_url=url,
                secret="styrmin/bench",  # noqa: S106 (a Secret's name)
            )
            s3 = S3Storage(location, S3Credentials("bench", "bench-secret"), root / "staging")
            s3._client.create_bucket(Bucket="bench")
            source = folder.staging(KEY)
            for round_ in range(args.rounds + 1):
                staging = s3.prepare(KEY)
                for name in ("shop.sqlite3", "schema-version"):
                    os.link(source / name, staging / name)  # the Job's files, without a copy
                backup = measure(lambda: s3.publish(KEY))
                found: list[list[str]] = []
                restore = measure(lambda found=found: found.append(s3.fetch(KEY, recorded)))  # type: ignore[misc]
                assert found == [[]], found  # every file came back with its size and sha256
                s3.finish_restore(KEY)
                if round_:
                    results.setdefault("s3 (moto): back up (upload)", []).append(backup)
                    results.setdefault("s3 (moto): restore (download)", []).append(restore)
        finally:
            process.terminate()
            process.wait(30)
    print(
        f"A backup of {args.mb} MB (+ a small file), median of {args.rounds} rounds (moto's MB/s is moto's):"
    )
    for name, rounds in results.items():
        report(name, args.mb, rounds)


if __name__ == "__main__":
    main()
