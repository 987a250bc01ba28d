"""Benchmark: rendering the example driver with Helm, and validating it (its render process included).

Run: python bench/driver_render.py
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from _figures import percentile

from styrmin_backend.drivers import (
    DeploymentConfiguration,
    load_driver_spec,
    render_deployment,
    validate_driver,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drivers" / "shop"
RENDER_TARGET_SECONDS = 0.5


def main() -> None:
    spec = load_driver_spec((EXAMPLE / "driver.styrmin.yml").read_text())
    configuration = DeploymentConfiguration(
        images={"server": "registry.local:5000/shop/server:{{ app.version }}"},
        env={"server": {"LEVEL": "debug"}},
    )
    for _ in range(5):  # warm-up
        render_deployment(EXAMPLE, spec, "shop", "default", "2.0.0", configuration)
    renders = []
    for _ in range(100):
        started = time.perf_counter()
        render_deployment(EXAMPLE, spec, "shop", "default", "2.0.0", configuration)
        renders.append(time.perf_counter() - started)
    print(
        f"render_deployment p50 {statistics.median(renders) * 1000:.1f} ms (target <= {RENDER_TARGET_SECONDS * 1000:.0f} ms)"
    )
    print(
        f"render_deployment p99 {percentile(renders, 0.99) * 1000:.1f} ms (target <= {RENDER_TARGET_SECONDS * 1000:.0f} ms)"
    )
    validations = []
    for _ in range(3):
        started = time.perf_counter()
        validate_driver(EXAMPLE)
        validations.append(time.perf_counter() - started)
    print(
        f"validate_driver p50 {statistics.median(validations):.2f} s (no target: the render process dominates)"
    )


if __name__ == "__main__":
    main()
