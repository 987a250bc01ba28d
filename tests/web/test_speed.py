"""The deployment page stays fast with a long history and a long task (see bench_pages.py)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Stack
from tests.web.bench_pages import TARGET_MS, measure

pytestmark = pytest.mark.slow


def test_deployment_page_with_1000_tasks_and_a_50_step_task_renders_within_100_ms(web: Stack) -> None:
    figures = measure(web, rounds=20)
    print(f"deployment page p50 {figures.deployment_p50:.1f} ms, task view p50 {figures.task_p50:.1f} ms")
    assert figures.deployment_p50 <= TARGET_MS
    assert figures.task_p50 <= TARGET_MS
