"""The agent's calls to the Prefect server through its REST API (``agent/prefect/_rest.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from styrmin_backend.agent.prefect._rest import PrefectApi, PrefectApiError
from styrmin_backend.agent.prefect.server import LocalPrefectServer
from styrmin_backend.prefect_connection import API_VERSION, PrefectConnection
from styrmin_backend.prefect_logs import PrefectLogReader
from tests.agent_prefect.conftest import make_context


class _Receiver(BaseHTTPRequestHandler):
    """A stand-in Prefect server on loopback: records each request, answers from ``answers``."""

    requests: list[tuple[str, str, dict[str, str], Any]]
    answers: list[tuple[int, dict[str, str], Any]]

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        status, headers, answer = self.answers.pop(0) if self.answers else (200, {}, None)
        payload = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[type[_Receiver]]:
    handler = type("Handler", (_Receiver,), {"requests": [], "answers": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/api"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_the_api_version_is_the_one_prefects_client_sends() -> None:
    from prefect.client.constants import SERVER_API_VERSION

    assert API_VERSION == SERVER_API_VERSION, "update prefect_connection.API_VERSION to Prefect's"


async def test_prefects_settings_reach_the_server_as_prefects_client_sends_them(
    receiver: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))  # no profiles file: the environment alone
    monkeypatch.setenv("PREFECT_API_URL", receiver.url)
    monkeypatch.setenv("PREFECT_API_KEY", "pnu_key")
    receiver.answers = [(404, {}, {"detail": "Not Found"})]  # no /csrf-token: a server without CSRF
    api = PrefectApi(PrefectConnection.from_settings())
    try:
        await api.send_worker_heartbeat("styrmin agents", "agent-1", 30.0)
        await api.send_worker_heartbeat("styrmin agents", "agent-1", 30.0)
    finally:
        await api.aclose()

    (_, token_path, _, _), *beats = receiver.requests
    assert token_path.startswith("/api/csrf-token?client=")
    assert [(method, path) for method, path, _, _ in beats] == [
        ("POST", "/api/work_pools/styrmin%20agents/workers/heartbeat")
    ] * 2  # the token was asked for once
    headers, body = beats[0][2], beats[0][3]
    assert headers["authorization"] == "Bearer pnu_key"
    assert headers["x-prefect-api-version"] == API_VERSION
    assert "prefect-csrf-token" not in headers
    assert body == {"name": "agent-1", "heartbeat_interval_seconds": 30.0}

    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "admin:secret")  # it goes before the key
    assert PrefectConnection.from_settings().headers()["Authorization"] == "Basic YWRtaW46c2VjcmV0"


def test_the_servers_log_reads_reach_prefect_with_prefects_credentials(
    receiver: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_KEY", raising=False)
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "admin:secret")
    receiver.answers = [(200, {}, [{"id": "run-1", "name": "shop-r2-upgrade", "state_type": "COMPLETED"}])]

    runs = PrefectLogReader(receiver.url).flow_runs(["styrmin-task:7"], "shop-r2")

    assert [run.name for run in runs] == ["shop-r2-upgrade"]
    ((method, path, headers, _),) = receiver.requests
    assert (method, path) == ("POST", "/api/flow_runs/filter")
    assert headers["authorization"] == "Basic YWRtaW46c2VjcmV0"
    assert headers["x-prefect-api-version"] == API_VERSION


async def test_a_busy_server_is_asked_again_and_an_error_names_its_detail(receiver: Any) -> None:
    receiver.answers = [
        (422, {}, {"detail": "CSRF protection is disabled."}),
        (503, {"Retry-After": "0"}, {"detail": "busy"}),
        (200, {}, None),
        (404, {}, {"detail": "Flow run not found"}),
    ]
    api = PrefectApi(PrefectConnection(api_url=receiver.url))
    try:
        await api.send_logs([{"message": "hello"}])
        with pytest.raises(PrefectApiError, match="404: Flow run not found") as raised:
            await api.flow_run_state("0b5bd1ad-cd33-4b5d-a3cb-3e0f6a5d2d4a")
    finally:
        await api.aclose()

    assert raised.value.status == 404
    assert [path for _, path, _, _ in receiver.requests][1:] == ["/api/logs/", "/api/logs/", ORPHAN_RUN_PATH]


ORPHAN_RUN_PATH = "/api/flow_runs/0b5bd1ad-cd33-4b5d-a3cb-3e0f6a5d2d4a"


@pytest.fixture(scope="module")
def prefect_with_csrf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrefectServer]:
    server = LocalPrefectServer(
        tmp_path_factory.mktemp("prefect-csrf"),
        settings={"PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true"},
    )
    server.start(timeout=300)
    try:
        yield server
    finally:
        server.stop()


async def test_the_agent_works_with_a_prefect_server_that_wants_csrf_tokens(
    prefect_with_csrf: LocalPrefectServer,
) -> None:
    import httpx

    refused = httpx.post(f"{prefect_with_csrf.api_url}/logs/", json=[])
    assert refused.status_code == 403, refused.text  # the server does want them

    api = PrefectApi(PrefectConnection(api_url=prefect_with_csrf.api_url))
    try:
        await api.make_work_pool("styrmin-agents", "styrmin-agent", "The Styrmin agents.")
        await api.make_work_pool("styrmin-agents", "styrmin-agent", "The Styrmin agents.")  # exists: fine
        await api.send_worker_heartbeat("styrmin-agents", "agent-csrf", 30.0)
    finally:
        await api.aclose()

    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(prefect_with_csrf.api_url) as client:
        seen = await client.read_workers_for_work_pool("styrmin-agents", limit=50, offset=0)
    assert [(worker.name, worker.status.value) for worker in seen] == [("agent-csrf", "ONLINE")]


def test_the_server_and_agent_process_runs_actions_without_importing_prefect(
    prefect_api_url: str, driver_dir: Path
) -> None:
    """Importing Prefect would hold 32 MB in that process for its whole life (see ``_rest``)."""
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from styrmin_backend.agent.prefect import ActionRunner

        async def main():
            async with ActionRunner({prefect_api_url!r}) as runner:
                await runner.wait_until_ready()
                outcome = await runner.run_action(
                    {str(driver_dir)!r}, "actions.py::returns_a_value", json.loads(sys.argv[1]), {{}}, 120
                )
            print(outcome.succeeded, sorted(m for m in sys.modules if m.split(".")[0] == "prefect"))

        asyncio.run(main())
        """
    )
    parameters = json.dumps({"context": make_context()})
    done = subprocess.run(
        [sys.executable, "-c", script, parameters], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True []"


def test_the_servers_log_reader_reads_past_the_200_lines_prefect_answers_at_once(
    prefect_api_url: str,
) -> None:
    # The task logs page asks for 500 lines: Prefect refused the whole read (422, "limit must be less
    # than or equal to 200"), so the page never showed a line.
    import uuid
    from datetime import UTC, datetime, timedelta

    import httpx

    run = str(uuid.uuid4())
    start = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)
    logs = [
        {"name": "styrmin.test", "level": 20, "message": f"line {n}", "flow_run_id": run,
         "timestamp": (start + timedelta(milliseconds=n)).isoformat()}
        for n in range(250)
    ]  # fmt: skip
    assert httpx.post(f"{prefect_api_url}/logs/", json=logs, timeout=60).status_code in (200, 201)
    reader = PrefectLogReader(prefect_api_url)

    assert [line.message for line in reader.lines([run], 0, 500)] == [f"line {n}" for n in range(250)]
    assert [line.message for line in reader.lines([run], 10, 210)] == [f"line {n}" for n in range(10, 220)]
