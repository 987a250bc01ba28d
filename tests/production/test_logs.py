"""Log lines in both formats: secrets redacted in messages and tracebacks alike."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from styrmin_backend.logs import configure_logging


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield io.StringIO()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_redact_the_message_and_the_traceback(captured: io.StringIO) -> None:
    configure_logging("INFO", "json", captured)
    log = logging.getLogger("styrmin.test")
    log.info("connecting to postgresql://styrmin:hunter2@db:5432/styrmin")
    try:
        raise RuntimeError("login failed: password=hunter2")
    except RuntimeError:
        log.exception("the agent could not log in")
    first, second = (json.loads(line) for line in captured.getvalue().splitlines())
    assert first["level"] == "INFO" and first["logger"] == "styrmin.test"
    assert first["message"] == "connecting to postgresql://styrmin:<redacted>@db:5432/styrmin"
    assert second["message"] == "the agent could not log in"
    assert "RuntimeError: login failed: password=<redacted>" in second["exception"]
    assert "hunter2" not in captured.getvalue()


def test_text_lines_are_redacted_too(captured: io.StringIO) -> None:
    configure_logging("INFO", "text", captured)
    logging.getLogger("uvicorn.access").info('127.0.0.1 - "GET /healthz?token=abc123secret HTTP/1.1" 200')
    line = captured.getvalue()
    assert "uvicorn.access" in line and "abc123secret" not in line and "<redacted>" in line
