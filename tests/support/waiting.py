"""Waiting for something a test started to come true, with a generous deadline and a message that says what."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05, message: str = "condition"
) -> Any:
    """Poll until `predicate()` returns something truthy; fail with `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message} (last value: {last!r})")
