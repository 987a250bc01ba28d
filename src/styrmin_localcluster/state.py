"""The optional state file: the cluster's objects saved so that a restarted cluster keeps them."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson

FORMAT = "localcluster.styrmin.io/state/v1"


def load_state(path: Path) -> dict[str, Any] | None:
    """The saved snapshot, or None when the file does not exist yet."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(
            f"state file {path} is not valid JSON ({exc}); move it away to start an empty cluster"
        ) from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"state file {path} is not a local cluster state file (format {FORMAT})")
    snapshot: dict[str, Any] = document["store"]
    return snapshot


def save_state(path: Path, snapshot: dict[str, Any]) -> None:
    """Write the snapshot atomically: a crash leaves either the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps({"format": FORMAT, "store": snapshot})
    fd, temporary = tempfile.mkstemp(prefix=".state-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
