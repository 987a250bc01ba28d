"""Benchmark: what installing the client alone costs, now and before the split into packages.

Run: python bench/client_install.py [--help-runs 15] [--before REF] [--no-before]

Builds the client's wheels (``styrmin`` and ``styrmin-drivers``, with ``uv build``), installs them
into an empty virtual environment with ``uv pip install`` (bytecode compiled, as ``./scripts/up``
does), and prints the size of what was installed, the number of distributions, and how long
``styrminctl --help`` takes to start (p50 of several runs, after warm-up runs). The same is done for
the single distribution of git ref ``--before`` (the commit before the split, where installing
``styrminctl`` meant installing the server), so both sets of figures come from one machine in one run.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from _figures import percentile

ROOT = Path(__file__).resolve().parents[1]
BEFORE_REF = "22c88f4"
"""The last commit with one distribution for the SDK, styrminctl, the server, agent and local cluster."""

SIZE_TARGET_MIB = 30.0
PACKAGES_TARGET = 25
HELP_TARGET_SECONDS = 0.3


@dataclass(frozen=True)
class Install:
    """What one installation of the client took."""

    size_bytes: int
    distributions: int
    help_seconds: list[float]
    help_cpu_seconds: list[float]


def build_client_wheels(source: Path, out: Path) -> list[Path]:
    """The client's wheels of the workspace at ``source``."""
    for package in ("styrmin", "styrmin-drivers"):
        _run(["uv", "build", "--quiet", "--wheel", "--package", package, "--out-dir", str(out)], cwd=source)
    return sorted(out.glob("*.whl"))


def build_single_wheel(ref: str, scratch: Path) -> list[Path]:
    """The one wheel of the repository at git ref ``ref`` (its project held everything)."""
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    source = scratch / "before"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    out = scratch / "before-wheels"
    _run(["uv", "build", "--quiet", "--wheel", "--out-dir", str(out)], cwd=source)
    return sorted(out.glob("*.whl"))


def install(wheels: list[Path], venv: Path, help_runs: int) -> Install:
    """Install ``wheels`` into a new, empty virtual environment and measure it."""
    _run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)])
    python = venv / "bin" / "python"
    _run(
        ["uv", "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python), *map(str, wheels)]
    )
    site_packages = next((venv / "lib").glob("python*/site-packages"))
    size = sum(path.stat().st_size for path in site_packages.rglob("*") if path.is_file())
    distributions = len(list(site_packages.glob("*.dist-info")))
    wall, cpu = help_start_seconds(venv / "bin" / "styrminctl", help_runs)
    return Install(size, distributions, wall, cpu)


def help_start_seconds(styrminctl: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (user + system) of each run; CPU varies less on a busy machine."""
    command = [str(styrminctl), "--help"]
    for _ in range(3):  # warm-up: the OS caches the files
        subprocess.run(command, capture_output=True, check=True)
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        wall.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def _run(command: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")


def _report(label: str, figures: Install) -> None:
    mib = figures.size_bytes / 2**20
    p50 = percentile(figures.help_seconds, 0.5)
    print(f"{label}:")
    print(f"  install size            {mib:8.1f} MiB   (target <= {SIZE_TARGET_MIB:.0f} MiB)")
    print(f"  distributions installed {figures.distributions:8d}       (target <= {PACKAGES_TARGET})")
    print(f"  styrminctl --help p50   {p50:8.3f} s     (target <= {HELP_TARGET_SECONDS} s)")
    cpu = percentile(figures.help_cpu_seconds, 0.5)
    print(f"    of which CPU, p50     {cpu:8.3f} s     (wall time waits for a busy machine's cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--help-runs", type=int, default=15)
    parser.add_argument("--before", default=BEFORE_REF, help="the git ref of the single distribution")
    parser.add_argument("--no-before", action="store_true", help="measure only the client of this tree")
    args = parser.parse_args()
    if shutil.which("uv") is None:
        raise SystemExit("uv is not on PATH; run ./scripts/test (or pip install uv) first.")
    with tempfile.TemporaryDirectory(prefix="styrmin-client-install-") as scratch_name:
        scratch = Path(scratch_name)
        client = install(
            build_client_wheels(ROOT, scratch / "wheels"), scratch / "client-venv", args.help_runs
        )
        before = None
        if not args.no_before:
            wheels = build_single_wheel(args.before, scratch)
            before = install(wheels, scratch / "before-venv", args.help_runs)
    _report("the client (styrmin + styrmin-drivers)", client)
    if before is not None:
        _report(f"before: the single distribution of {args.before}", before)


if __name__ == "__main__":
    main()
