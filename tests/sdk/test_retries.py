"""Retries: reads and idempotent writes are retried on connection errors and 502/503/504 for a while;
other writes never are.

The server here is a real HTTP server on loopback that answers from a script, so that a test can see
how many requests arrived.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from styrmin import Client, ServerError, StyrminConnectionError, StyrminError
from styrmin._http import retry_delay


class _Scripted(BaseHTTPRequestHandler):
    script: ClassVar[list[int]] = []
    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        type(self).seen.append(f"{self.command} {self.path}")
        status = type(self).script.pop(0) if type(self).script else 200
        if status == 299:  # a page that is not Styrmin's
            data = b"<html>Welcome to nginx</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if status == 200:
            body = {"username": "admin", "role": "admin", "builtin": False, "token_kind": "api"}
        else:
            body = {"message": "Styrmin is starting; try again.", "field": None, "errors": []}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    do_GET = _answer
    do_POST = _answer
    do_DELETE = _answer
    do_PUT = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def scripted() -> Iterator[tuple[str, type[_Scripted]]]:
    _Scripted.script, _Scripted.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    # It looks for its shutdown every 0.05 s instead of 0.5 s: each test's teardown waited for it.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Scripted
    server.shutdown()
    server.server_close()


def test_a_read_is_retried_on_503_until_it_succeeds(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.script = [503, 503]
    with Client(url, "t", retries=3) as client:
        assert client.whoami().username == "admin"
    assert handler.seen == ["GET /api/v1/whoami"] * 3


def test_a_read_gives_up_after_its_retries(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.script = [503] * 5
    with Client(url, "t", retries=2) as client, pytest.raises(ServerError) as caught:
        client.whoami()
    assert caught.value.status == 503 and caught.value.message.startswith("Styrmin is starting; try again.")
    assert len(handler.seen) == 3


def test_a_write_that_is_not_idempotent_is_never_retried(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.script = [503, 503]
    with Client(url, "t", retries=3) as client:
        with pytest.raises(ServerError):
            client.deployments.delete("shop")
        with pytest.raises(ServerError):
            client.deployments.configure("shop", {"values": {}})
    assert handler.seen == ["DELETE /api/v1/deployments/shop", "PUT /api/v1/deployments/shop/configuration"]


def test_stopping_starting_and_upgrading_are_retried_on_503(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    with Client(url, "t", retry_seconds=30) as client:
        for request in (
            lambda: client.deployments.stop("shop", ["server"]),
            lambda: client.deployments.start("shop", ["server"]),
            lambda: client.deployments.upgrade("shop", app_version="2.0"),
        ):
            handler.script = [503]
            # The scripted server's 200 is a user, not a change: what matters is that the call went again.
            with pytest.raises(StyrminError, match="is not what Styrmin answers"):
                request()
    assert handler.seen == [
        "POST /api/v1/deployments/shop/stop",
        "POST /api/v1/deployments/shop/stop",
        "POST /api/v1/deployments/shop/start",
        "POST /api/v1/deployments/shop/start",
        "POST /api/v1/deployments/shop/upgrade",
        "POST /api/v1/deployments/shop/upgrade",
    ]


def test_a_read_waits_for_the_retry_time_and_logs_once_why(
    scripted: tuple[str, type[_Scripted]], caplog: pytest.LogCaptureFixture
) -> None:
    url, handler = scripted
    handler.script = [503] * 6
    with caplog.at_level(logging.WARNING, logger="styrmin"), Client(url, "t", retry_seconds=60) as client:
        assert client.whoami().username == "admin"
    assert len(handler.seen) == 7
    waits = [r.getMessage() for r in caplog.records if "Waiting up to 60 s for Styrmin" in r.getMessage()]
    assert len(waits) == 1 and "Styrmin is starting; try again." in waits[0] and url in waits[0]


def test_the_retry_time_comes_from_styrmin_retry_seconds(
    scripted: tuple[str, type[_Scripted]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = scripted
    monkeypatch.setenv("STYRMIN_RETRY_SECONDS", "0")
    handler.script = [503]
    with Client(url, "t") as client, pytest.raises(ServerError):
        client.whoami()
    assert len(handler.seen) == 1


def test_backoff_grows_with_jitter_up_to_five_seconds() -> None:
    delays = [retry_delay(attempt, None) for attempt in range(1, 12) for _ in range(20)]
    assert min(delays) >= 0.125 and max(delays) <= 5.0
    late = {retry_delay(10, None) for _ in range(20)}
    assert len(late) > 1 and all(2.5 <= d <= 5.0 for d in late)  # spread: clients do not come back at once


def test_an_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        Client(f"http://127.0.0.1:{port}", "t", retries=1) as client,
        pytest.raises(StyrminConnectionError) as caught,
    ):
        client.whoami()
    assert caught.value.status is None
    assert f"127.0.0.1:{port}" in caught.value.message and "cannot be reached" in caught.value.message


def test_an_answer_that_is_not_styrmins_is_a_styrmin_error(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.script = [299]
    with Client(url, "t") as client, pytest.raises(StyrminError) as caught:
        client.whoami()
    assert caught.value.status == 200
    assert "is not what Styrmin answers" in caught.value.message and url in caught.value.message


def test_an_action_s_step_note_and_output_are_retried_on_503(scripted: tuple[str, type[_Scripted]]) -> None:
    # execute_commands notes a deleted Job and keeps a failed command's output through these calls;
    # the server records a repeated note once and replaces the output, so a database outage in the
    # middle of a migration must not fail the action (bench/outage.py found both failing at once).
    url, handler = scripted
    with Client(url, "t", retry_seconds=30) as client:
        handler.script = [503]
        client.steps.add_note(7, "Deleted Job shop-migrate-1 of an earlier action.")
        handler.script = [503]
        client.steps.store_output(7, "the end\n", truncated=False)
    assert handler.seen == [
        "POST /api/v1/agent/steps/7/notes",
        "POST /api/v1/agent/steps/7/notes",
        "PUT /api/v1/agent/steps/7/output",
        "PUT /api/v1/agent/steps/7/output",
    ]
