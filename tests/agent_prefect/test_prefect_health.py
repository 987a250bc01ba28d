"""How often the agent asks its Prefect server whether it answers: before claims and while actions
run, against a real HTTP server on 127.0.0.1 that counts the checks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from styrmin_backend.agent.prefect.health import PrefectWatch


class _Health(BaseHTTPRequestHandler):
    checks = 0

    def do_GET(self) -> None:
        type(self).checks += 1
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def prefect_api() -> Iterator[str]:
    _Health.checks = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()
    server.server_close()


async def test_a_fresh_answer_stands_and_an_old_one_is_asked_again(prefect_api: str) -> None:
    watch = PrefectWatch(prefect_api, check_seconds=60, outage_seconds=10)
    try:
        assert await watch.check() is None
        assert await watch.check(fresh_for=60) is None
        assert _Health.checks == 1

        assert await watch.check() is None  # no freshness asked for: always a request
        assert await watch.check(fresh_for=1e-9) is None
        assert _Health.checks == 3
    finally:
        await watch.close()


async def test_the_watch_checks_only_while_actions_run(prefect_api: str) -> None:
    watch = PrefectWatch(prefect_api, check_seconds=0.05, outage_seconds=10)
    busy = False
    stop = asyncio.Event()
    watching = asyncio.create_task(watch.watch(stop, busy=lambda: busy))
    try:
        await asyncio.sleep(0.5)
        assert _Health.checks == 0

        busy = True
        for _ in range(200):
            await asyncio.sleep(0.05)
            if _Health.checks >= 2:
                break
        assert _Health.checks >= 2
    finally:
        stop.set()
        await watching
        await watch.close()
