"""Timeline marks of one Python process, for ``bench/vs_helm.py --profile`` only.

Python imports ``sitecustomize`` at start-up from PYTHONPATH. The benchmark puts this folder there and
names a file in ``VS_HELM_TIMELINE``; every process started with both (the agent's action processes
among them) then appends one JSON line per mark to that file: its start, the job reaching it (the
first STYRMIN_* variable it sets), the driver's ``actions.py`` being read, the
first module of each package loaded after the job arrived, every HTTP request it sends
(start and end), the garbage collections that pause it, and its exit. Without ``VS_HELM_TIMELINE`` it
does nothing.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import threading
import time
from typing import Any

_PATH = os.environ.get("VS_HELM_TIMELINE")
_lock = threading.Lock()
_seen: set[str] = set()


def mark(what: str, **fields: Any) -> None:
    """Append one mark: the wall-clock time, this process, what happened."""
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "what": what, **fields}) + "\n"
    try:
        with _lock, open(_PATH or os.devnull, "a") as file:
            file.write(line)
    except OSError:  # the benchmark has ended and removed its folder
        pass


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "os.putenv" and "job" not in _seen:
        key = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        if key.startswith("STYRMIN_"):
            _seen.add("job")
            mark("process: job received, env set")
    elif event == "open" and isinstance(args[0], str) and args[0].endswith("actions.py"):
        mark("process: reads actions.py (the driver's module)")
    elif event == "import" and "job" in _seen and args[0] not in sys.modules:
        # A module loaded only once the job arrived: work a pre-started process could do ahead.
        package = args[0].split(".", 1)[0]
        if f"import {package}" not in _seen:
            _seen.add(f"import {package}")
            mark(f"process: imports {args[0]} (first module of {package} loaded during the run)")


def _wrap_send(cls: Any, is_async: bool) -> None:
    original = cls.send

    def label(request: Any) -> str:
        return f"{request.method} {request.url.host}:{request.url.port}{request.url.raw_path.decode()[:140]}"

    if is_async:

        async def send_async(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.time()
            response = await original(self, request, *args, **kwargs)
            mark("http", request=label(request), started=started, status=response.status_code)
            return response

        cls.send = send_async
    else:

        def send_sync(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.time()
            response = original(self, request, *args, **kwargs)
            mark("http", request=label(request), started=started, status=response.status_code, sync=True)
            return response

        cls.send = send_sync


_gc_started: list[float] = []


def _gc_pause(phase: str, info: dict[str, Any]) -> None:
    """Mark each garbage collection that holds every thread of the process for over 5 ms."""
    if phase == "start":
        _gc_started[:] = [time.perf_counter()]
    elif _gc_started and (took := time.perf_counter() - _gc_started[0]) > 0.005:
        mark(
            f"process: garbage collection of generation {info['generation']}: {took:.3f} s",
            argv=" ".join(sys.argv[-3:]),
        )


def _install() -> None:
    mark("process: started", argv=" ".join(sys.argv[-3:]))
    gc.callbacks.append(_gc_pause)
    atexit.register(lambda: mark("process: exits"))
    sys.addaudithook(_audit)
    for name in ("httpx", "httpx2"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        _wrap_send(module.AsyncClient, is_async=True)
        _wrap_send(module.Client, is_async=False)


if _PATH:
    _install()
