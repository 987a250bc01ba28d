"""The process's memory: what a started server or agent leaves out of garbage collections."""

from __future__ import annotations

import contextlib
import ctypes
import gc


def keep_started_objects_out_of_garbage_collections() -> None:
    """Leave what the process made while starting (modules, clients, the app) out of later garbage
    collections.

    Python's full collection walks every object the process holds: 0.1-0.2 s in a started server or
    agent, during which no thread of the process runs (a request or an upgrade's task waits for it).
    Once frozen, the started objects are never walked again; what is made later still is.
    """
    gc.collect()
    gc.freeze()
    give_back_the_free_heap()


def give_back_the_free_heap() -> None:
    """Return to the system the heap that starting freed (imports, a warm-up): glibc keeps freed
    memory for later unless asked, and it would stay counted as the process's for as long as it runs."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(0)
