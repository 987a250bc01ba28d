"""The process's log: plain text or one JSON object a line, with secrets redacted either way."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal, TextIO

from styrmin_backend.domain.redaction import redact

LogFormat = Literal["text", "json"]
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RedactingText(logging.Formatter):
    """The usual one-line text, with secrets in the message and traceback redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the traceback if any (all redacted)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: LogFormat = "text", stream: TextIO | None = None) -> None:
    """Send every logger (uvicorn's included) to ``stream`` (stderr) in ``log_format``, at ``level``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else _RedactingText(_TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # uvicorn's loggers have handlers of their own: route them through the root handler instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)  # the root's level decides, whatever uvicorn's config set
        logger.disabled = False
