"""Reading flow runs and their log lines from a Prefect server's REST API (for ``services.task_logs``).

The server reads Prefect for its users, so that no one needs access to Prefect to read an action's
log. Every call is bounded: a timeout, a page of lines, and a cut on each line's length. It reaches
Prefect as the agent does, with Prefect's own settings (``prefect_connection``): an API key or auth
string, and TLS.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import httpx

from styrmin_backend.prefect_connection import PrefectConnection
from styrmin_backend.services.task_logs import FlowRunLine, FlowRunRef, PrefectUnreachable

PREFECT_TIMEOUT_SECONDS = 10.0
"""How long one call to Prefect may take before the log read says Prefect did not answer."""
_FLOW_RUNS_LIMIT = 200


PREFECT_LOGS_PAGE = 200
"""The most log lines a Prefect server answers to one ``/logs/filter`` (it refuses more with 422)."""


class PrefectLogReader:
    """The flow runs and log lines of a Prefect server at ``api_url`` (``http://host:4200/api``)."""

    def __init__(self, api_url: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self._transport = transport
        self._connection = PrefectConnection.from_settings(api_url)

    def _post(self, path: str, body: dict[str, object]) -> list[dict[str, object]]:
        try:
            with httpx.Client(
                timeout=PREFECT_TIMEOUT_SECONDS,
                transport=self._transport,
                headers=self._connection.headers(),
                verify=self._connection.verify(),
            ) as client:
                response = client.post(f"{self.api_url}{path}", json=body)
                response.raise_for_status()
                answer = response.json()
        except (httpx.HTTPError, ValueError) as error:
            raise PrefectUnreachable(
                f"Prefect at {self.api_url} did not answer ({type(error).__name__}: {str(error)[:200]}); "
                "the log lines are there once it is back (the stored output is below)."
            ) from None
        return answer if isinstance(answer, list) else []

    def flow_runs(self, tags: Sequence[str], name_prefix: str) -> list[FlowRunRef]:
        """The flow runs with all of ``tags`` whose name starts with ``name_prefix``, oldest first."""
        body: dict[str, object] = {
            "flow_runs": {"tags": {"all_": list(tags)}, "name": {"like_": name_prefix}},
            "sort": "EXPECTED_START_TIME_ASC",
            "limit": _FLOW_RUNS_LIMIT,
        }
        runs = self._post("/flow_runs/filter", body)
        return [
            FlowRunRef(
                id=str(run["id"]),
                name=str(run.get("name", "")),
                state=str(run.get("state_type") or ""),
            )
            for run in runs
            if str(run.get("name", "")).startswith(name_prefix)
        ]

    def flow_run(self, flow_run_id: str) -> FlowRunRef | None:
        """One flow run, or None when Prefect has no such run."""
        body: dict[str, object] = {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 1}
        runs = self._post("/flow_runs/filter", body)
        if not runs:
            return None
        run = runs[0]
        return FlowRunRef(
            id=str(run["id"]), name=str(run.get("name", "")), state=str(run.get("state_type") or "")
        )

    def lines(self, flow_run_ids: Sequence[str], offset: int, limit: int) -> list[FlowRunLine]:
        """The log lines of ``flow_run_ids`` together, oldest first, from ``offset``, at most ``limit``:
        read in pages of ``PREFECT_LOGS_PAGE`` lines, the most a Prefect server answers at once."""
        if not flow_run_ids:
            return []
        found: list[FlowRunLine] = []
        while len(found) < limit:
            asked = min(PREFECT_LOGS_PAGE, limit - len(found))
            body: dict[str, object] = {
                "logs": {"flow_run_id": {"any_": list(flow_run_ids)}},
                "sort": "TIMESTAMP_ASC",
                "offset": offset + len(found),
                "limit": asked,
            }
            page = [
                FlowRunLine(
                    flow_run_id=str(entry.get("flow_run_id") or ""),
                    timestamp=datetime.fromisoformat(str(entry["timestamp"]).replace("Z", "+00:00")),
                    level=int(str(entry.get("level") or 20)),
                    message=str(entry.get("message") or ""),
                )
                for entry in self._post("/logs/filter", body)
            ]
            found += page
            if len(page) < asked:
                break
        return found
