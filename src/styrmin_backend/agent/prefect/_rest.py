"""The agent's calls to the Prefect server, through Prefect's REST API with httpx.

The agent asks the Prefect server for little: its work pool and worker heartbeats, the flow-run
states it sets when an action crashed, timed out or was cancelled, an action's log records, the
first error of a crashed run, and the default result storage. Prefect's client library would do
it, but importing it (``prefect.settings`` alone imports 200 of Prefect's modules) holds 32 MB in
the server and agent process for its whole life. These calls are the ones Prefect's client sends
(``PrefectClient``): the same paths, bodies, headers, CSRF token and retries. Where the server is
and how to reach it is ``prefect_connection.PrefectConnection``, from Prefect's own settings.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from styrmin_backend.prefect_connection import PrefectConnection

logger = logging.getLogger(__name__)

FINAL_STATE_TYPES = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
"""The flow-run state types after which Prefect's orchestration changes nothing."""

_RETRIED_STATUSES = frozenset({408, 429, 502, 503})
"""Answers Prefect's client tries again after (a timeout, rate limits, a server restarting)."""
_ATTEMPTS = 4
_RETRY_SECONDS = (0.5, 1.0, 2.0)
_MAX_RETRY_AFTER_SECONDS = 10.0


class PrefectApiError(Exception):
    """The Prefect server answered a call with an error; ``status`` is its HTTP status."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"the Prefect server answered {status}: {detail}")
        self.status = status


@dataclass(frozen=True)
class FlowRunState:
    """A flow run's current state, as far as the agent reads it."""

    type: str
    message: str | None

    @property
    def final(self) -> bool:
        return self.type in FINAL_STATE_TYPES


class PrefectApi:
    """The Prefect server's REST API, for the agent (one per ``ActionRunner``); close it when done."""

    def __init__(self, connection: PrefectConnection) -> None:
        if not connection.api_url:
            raise ValueError("PrefectApi needs the Prefect server's API URL.")
        self._http = httpx.AsyncClient(
            base_url=connection.api_url.rstrip("/") + "/",
            headers=connection.headers(),
            verify=connection.verify(),
            timeout=30.0,
        )
        self._csrf_client = str(uuid.uuid4())
        self._csrf: dict[str, str] | None = None
        """The CSRF headers of change requests; empty once the server said it wants none."""
        self._csrf_expires: datetime | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send_worker_heartbeat(self, work_pool: str, worker: str, interval_seconds: float) -> None:
        """Tell the server the worker ``worker`` of ``work_pool`` is alive (Prefect shows it Online)."""
        await self._call(
            "POST",
            f"work_pools/{_segment(work_pool)}/workers/heartbeat",
            {"name": worker, "heartbeat_interval_seconds": interval_seconds},
        )

    async def make_work_pool(self, name: str, pool_type: str, description: str) -> None:
        """Make the work pool ``name`` unless it exists."""
        try:
            await self._call(
                "POST", "work_pools/", {"name": name, "type": pool_type, "description": description}
            )
        except PrefectApiError as error:
            if error.status != 409:  # 409: it exists
                raise

    async def send_logs(self, logs: list[dict[str, Any]]) -> None:
        """Store flow runs' log records (Prefect's ``LogCreate``, as JSON)."""
        await self._call("POST", "logs/", logs)

    async def default_result_storage(self) -> str | None:
        """The id of the server's default result storage block; None when it has none."""
        answer = await self._call("GET", "admin/storage")
        block = answer.get("default_result_storage_block_id") if isinstance(answer, dict) else None
        return str(block) if block else None

    async def flow_run_state(self, flow_run_id: str) -> FlowRunState | None:
        """The flow run's current state; None when it has none."""
        answer = await self._call("GET", f"flow_runs/{_segment(flow_run_id)}")
        state = answer.get("state") if isinstance(answer, dict) else None
        if not isinstance(state, dict):
            return None
        return FlowRunState(str(state.get("type")), state.get("message"))

    async def force_flow_run_state(self, flow_run_id: str, state_type: str, name: str, message: str) -> None:
        """Set the flow run's state, whatever it is now (Prefect's ``force=True``)."""
        await self._call(
            "POST",
            f"flow_runs/{_segment(flow_run_id)}/set_state",
            {"state": {"type": state_type, "name": name, "message": message}, "force": True},
        )

    async def first_error_message(self, flow_run_id: str) -> str | None:
        """The message of the flow run's first ERROR (or worse) log record; None when it has none."""
        logs = await self._call(
            "POST",
            "logs/filter",
            {
                "logs": {"flow_run_id": {"any_": [flow_run_id]}, "level": {"ge_": logging.ERROR}},
                "sort": "TIMESTAMP_ASC",
                "limit": 1,
                "offset": 0,
            },
        )
        if not isinstance(logs, list) or not logs:
            return None
        return str(logs[0].get("message") or "")

    async def unfinished_flow_runs(self, tag: str, *, created_before: datetime | None = None) -> list[str]:
        """The ids of the flow runs tagged ``tag`` that are Scheduled, Pending or Running (at most 200,
        newest first), of those expected to start before ``created_before`` when given."""
        flow_runs: dict[str, Any] = {
            "tags": {"all_": [tag]},
            "state": {"type": {"any_": ["SCHEDULED", "PENDING", "RUNNING"]}},
        }
        if created_before is not None:
            flow_runs["expected_start_time"] = {"before_": created_before.isoformat()}
        runs = await self._call(
            "POST", "flow_runs/filter", {"flow_runs": flow_runs, "sort": "ID_DESC", "limit": 200, "offset": 0}
        )
        return [str(run["id"]) for run in runs] if isinstance(runs, list) else []

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        """Send one call; try again after a refused connection, a timeout, 408, 429, 502 or 503, as
        Prefect's client does (a few times, a little longer each time, or as ``Retry-After`` says).

        Raises:
            PrefectApiError: the server answered with an error status.
            httpx.TransportError: the server could not be reached, the last time too.
        """
        for attempt in range(_ATTEMPTS):
            last = attempt == _ATTEMPTS - 1
            try:
                headers = await self._csrf_headers() if method != "GET" else {}
                response = await self._http.request(method, path, json=body, headers=headers)
            except httpx.TransportError:
                if last:
                    raise
                await asyncio.sleep(_RETRY_SECONDS[attempt])
                continue
            if response.status_code in _RETRIED_STATUSES and not last:
                await asyncio.sleep(_retry_after(response) or _RETRY_SECONDS[attempt])
                continue
            if response.status_code == 403 and "csrf" in response.text.lower() and self._csrf and not last:
                self._csrf = None  # expired early: ask for a new token
                continue
            if response.is_error:
                raise PrefectApiError(response.status_code, _detail(response))
            return response.json() if response.content else None
        raise AssertionError("unreachable")

    async def _csrf_headers(self) -> dict[str, str]:
        """The CSRF token headers a change request carries; none when the server wants none.

        As Prefect's client: ask for a token before the first change request, again once it
        expires, and never again after the server says CSRF protection is off (422) or has no
        such endpoint (404)."""
        expired = (
            self._csrf_expires is not None and datetime.now(self._csrf_expires.tzinfo) >= self._csrf_expires
        )
        if self._csrf is not None and not expired:
            return self._csrf
        response = await self._http.get("csrf-token", params={"client": self._csrf_client})
        if response.status_code in (404, 422):
            self._csrf, self._csrf_expires = {}, None
            return self._csrf
        if response.is_error:
            raise PrefectApiError(response.status_code, _detail(response))
        token = response.json()
        self._csrf = {"Prefect-Csrf-Token": str(token["token"]), "Prefect-Csrf-Client": self._csrf_client}
        expiration = token.get("expiration")
        self._csrf_expires = datetime.fromisoformat(expiration) if expiration else None
        return self._csrf


def _segment(value: str) -> str:
    """``value`` as one segment of a URL path."""
    return quote(value, safe="")


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(float(response.headers["Retry-After"]), _MAX_RETRY_AFTER_SECONDS)
    except (KeyError, ValueError):
        return None


def _detail(response: httpx.Response) -> str:
    """The server's words for an error answer: its ``detail``, else the start of its body."""
    try:
        answer = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(answer, dict) and answer.get("detail"):
        return str(answer["detail"])[:300]
    return str(answer)[:300]
