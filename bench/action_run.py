"""Benchmark: the overhead of running an empty action as an isolated Prefect flow run.

Starts its own local Prefect server and action runner, then measures, from the request to the
outcome: one empty action, and three empty actions in a row (an upgrade whose pre, core and post
hooks each run one action), and four at once. Also prints the start of the server and of the
action fork server, the fork server's memory, and the cost of redacting an error line and a 64 KiB
output tail.

Run: python bench/action_run.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from _figures import percentile

from styrmin_backend.actions import GlobalContext
from styrmin_backend.agent.prefect import ActionRunner, LocalPrefectServer
from styrmin_backend.domain.redaction import redact

ONE_RUN_TARGET_SECONDS = 0.5
THREE_RUNS_TARGET_SECONDS = 1.5
REDACT_TAIL_TARGET_MS = 50.0

ACTIONS = """
from prefect import flow

from styrmin_backend.actions import GlobalContext


@flow
async def empty(context: GlobalContext) -> None:
    pass
"""

CONTEXT = GlobalContext(
    deployment_id=1,
    deployment_name="shop",
    namespace="shop",
    cluster_id="local",
    driver_name="shop",
    driver_version="1.1.0",
    current_app_version="1.0.0",
    target_app_version="1.1.0",
    revision=2,
    task_id=1,
    hook_step_id=1,
    hook="upgrade",
    mode="core",
    api_url="http://127.0.0.1:8080",
).model_dump(mode="json")
ENV = {"STYRMIN_TOKEN": "sty_bench_token_0123456789abcdef", "STYRMIN_URL": "http://127.0.0.1:8080"}


def _line(name: str, values: list[float], target: float | None = None, unit: str = "s") -> None:
    scale = 1000.0 if unit == "ms" else 1.0
    text = f"{name}: p50 {statistics.median(values) * scale:.3f} {unit}, p99 {percentile(values, 0.99) * scale:.3f} {unit}"
    if target is not None:
        text += f" (target <= {target:g} {unit})"
    print(text, flush=True)


async def _empty_run(runner: ActionRunner, driver: Path) -> float:
    outcome = await runner.run_action(driver, "actions.py::empty", {"context": CONTEXT}, ENV, 60)
    if not outcome.succeeded:
        raise SystemExit(f"The empty action failed: {outcome.error}")
    return outcome.duration


def _runner_process_ids() -> list[int]:
    """The fork server this benchmark started, found by its command line."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            command = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(os.getpid()) and b"prefect._process" in command:
            found.append(int(status.parent.name))
    return found


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _bench(work: Path, runs: int) -> None:
    driver = work / "driver"
    driver.mkdir()
    (driver / "actions.py").write_text(ACTIONS)

    server = LocalPrefectServer(work / "prefect")
    server.start()
    try:
        print(f"local Prefect server start: {server.start_seconds:.1f} s (fresh database)", flush=True)
        async with ActionRunner(server.api_url) as runner:
            started = time.monotonic()
            await runner.wait_until_ready()
            print(f"action fork server ready: {time.monotonic() - started:.1f} s (once per agent)")
            (pid,) = _runner_process_ids()
            print(f"the fork server: {_rss_mib(pid):.0f} MiB resident, {_pss_mib(pid):.0f} MiB PSS")

            for _ in range(3):  # warm-up: the server's first flow runs are slower
                await runner.wait_until_ready()
                await _empty_run(runner, driver)

            one = []
            for _ in range(runs):
                await runner.wait_until_ready()
                one.append(await _empty_run(runner, driver))
            _line("one empty action run (request to outcome)", one, ONE_RUN_TARGET_SECONDS)

            three = []
            for _ in range(max(3, runs // 2)):
                await runner.wait_until_ready()
                started = time.monotonic()
                for _ in range(3):
                    await _empty_run(runner, driver)
                three.append(time.monotonic() - started)
            _line("three empty action runs in a row (pre, core, post)", three, THREE_RUNS_TARGET_SECONDS)

            together = []
            for _ in range(max(3, runs // 4)):
                started = time.monotonic()
                await asyncio.gather(*(_empty_run(runner, driver) for _ in range(4)))
                together.append(time.monotonic() - started)
            _line("four empty action runs at once (for scale: no process to wait for)", together)
    finally:
        server.stop()


def _bench_redaction() -> None:
    line = "Action actions.py::upgrade crashed (its process exited with code 3): token sty_bench_token_0123 refused"
    tail = ("2026-11-29T10:00:00Z INFO migrating table users: batch 1200 of 5000 done, 12.5 MB/s\n" * 900)[
        :65536
    ]
    for _ in range(5):
        redact(tail, [ENV["STYRMIN_TOKEN"]])
    lines, tails = [], []
    for _ in range(200):
        started = time.perf_counter()
        redact(line, [ENV["STYRMIN_TOKEN"]])
        lines.append(time.perf_counter() - started)
    for _ in range(30):
        started = time.perf_counter()
        redact(tail, [ENV["STYRMIN_TOKEN"]])
        tails.append(time.perf_counter() - started)
    _line("redact one error line", lines, unit="ms")
    _line("redact a 64 KiB output tail", tails, REDACT_TAIL_TARGET_MS, unit="ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="measured runs of one empty action")
    arguments = parser.parse_args()
    _bench_redaction()
    with tempfile.TemporaryDirectory(prefix="styrmin-bench-") as work:
        asyncio.run(_bench(Path(work), arguments.runs))


if __name__ == "__main__":
    main()
