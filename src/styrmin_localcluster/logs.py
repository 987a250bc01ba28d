"""Reading container logs from their files: the tail, a byte limit, and following a running container."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

_BLOCK = 64 * 1024
FOLLOW_POLL_SECONDS = 0.05


def tail_offset(path: Path, lines: int) -> int:
    """The file offset where the last `lines` lines start (reading backwards, not the whole file)."""
    size = path.stat().st_size
    if lines <= 0:
        return size
    with path.open("rb") as handle:
        position = size
        # A final newline ends the last line rather than starting an empty one.
        handle.seek(max(0, size - 1))
        newlines_needed = lines + (1 if size and handle.read(1) == b"\n" else 0)
        while position > 0:
            start = max(0, position - _BLOCK)
            handle.seek(start)
            block = handle.read(position - start)
            for index in range(len(block) - 1, -1, -1):
                if block[index] == 0x0A:
                    newlines_needed -= 1
                    if newlines_needed == 0:
                        return start + index + 1
            position = start
    return 0


async def stream_log(
    path: Path,
    tail_lines: int | None,
    limit_bytes: int | None,
    follow: bool,
    still_running: Callable[[], bool],
) -> AsyncIterator[bytes]:
    """Yield the log in chunks; when following, keep yielding until the container has stopped."""
    remaining = limit_bytes if limit_bytes and limit_bytes > 0 else None
    offset = tail_offset(path, tail_lines) if tail_lines is not None and path.exists() else 0
    fd = os.open(path, os.O_RDONLY) if path.exists() else None
    try:
        while True:
            if fd is None and path.exists():
                fd = os.open(path, os.O_RDONLY)
            progressed = False
            if fd is not None:
                while True:
                    want = _BLOCK if remaining is None else min(_BLOCK, remaining)
                    if want <= 0:
                        return
                    chunk = os.pread(fd, want, offset)
                    if not chunk:
                        break
                    offset += len(chunk)
                    progressed = True
                    if remaining is not None:
                        remaining -= len(chunk)
                    yield chunk
            if not follow:
                return
            if not progressed:
                if not still_running():
                    # One last read: the process may have written just before it ended.
                    if fd is not None and os.fstat(fd).st_size > offset:
                        continue
                    return
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
    finally:
        if fd is not None:
            os.close(fd)
