"""Benchmark: how fast `styrminctl --help` starts, and how fast an idle `styrmin up` stops on Ctrl-C.

Run: python bench/cli_start.py [--help-runs 20] [--up-runs 2]

The styrminctl next to this Python (the console script that `uv sync` installs) runs as a user runs
it. `styrmin up` runs in a fresh data dir, waits until it serves and its agent is idle, then gets
SIGINT; the figure is the time from the signal to the process's exit.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _figures import free_port, percentile

HELP_TARGET_SECONDS = 0.3
STOP_TARGET_SECONDS = 3.0
IDLE_SECONDS = 5.0
"""How long `styrmin up` runs idle before it is stopped (its agent long-polls for tasks meanwhile)."""


def styrminctl_command() -> list[str]:
    """The installed console script, else the module (the same code, one interpreter start)."""
    script = Path(sys.executable).parent / "styrminctl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "styrmin.cli"]


def help_start_seconds(runs: int) -> list[float]:
    command = [*styrminctl_command(), "--help"]
    for _ in range(3):  # warm-up: the OS caches the files
        subprocess.run(command, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return times


def up_stop_seconds(data_dir: Path) -> float:
    port = free_port()
    log = data_dir / "up.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "styrmin_backend.cli", "up", "--port", str(port)],
            env={**os.environ, "STYRMIN_DATA_DIR": str(data_dir / "data"), "STYRMIN_LOG_LEVEL": "WARNING"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit(f"styrmin up did not start; see {log}") from None
                time.sleep(0.2)
        time.sleep(IDLE_SECONDS)
        started = time.perf_counter()
        process.send_signal(signal.SIGINT)
        process.wait(300)
        return time.perf_counter() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--help-runs", type=int, default=20, help="timed `styrminctl --help` runs")
    parser.add_argument("--up-runs", type=int, default=2, help="`styrmin up` start/stop rounds (0: skip)")
    options = parser.parse_args()

    helps = help_start_seconds(options.help_runs)
    print(
        f"styrminctl --help start p50 {statistics.median(helps) * 1000:.0f} ms, "
        f"p99 {percentile(helps, 0.99) * 1000:.0f} ms (target < {HELP_TARGET_SECONDS * 1000:.0f} ms)"
    )
    if options.up_runs <= 0:
        return
    stops = []
    for _ in range(options.up_runs):
        with tempfile.TemporaryDirectory(prefix="styrmin-bench-up-") as scratch:
            stops.append(up_stop_seconds(Path(scratch)))
    print(
        f"styrmin up idle stop (SIGINT to exit) p50 {statistics.median(stops):.1f} s over {len(stops)} runs "
        f"(target < {STOP_TARGET_SECONDS:.0f} s)"
    )


if __name__ == "__main__":
    main()
