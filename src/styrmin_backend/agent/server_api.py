"""The agent's client of the Styrmin server: the only way the agent reaches the control plane."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel

from styrmin_backend.domain.tasks import TaskType


class ClaimedTask(BaseModel):
    """A task the agent claimed, with what it needs to carry it out."""

    task: dict[str, Any]
    change_type: TaskType
    change: dict[str, Any]
    deployment: dict[str, Any]
    actions_token: str
    styrmin_url: str

    @property
    def task_id(self) -> int:
        return int(self.task["id"])

    @property
    def revision(self) -> int:
        return int(self.task["revision"] or 0)


class ServerError(Exception):
    """The server refused or failed an agent call."""


class ServerApi:
    """Calls of the agent protocol (``/api/v1/agent``), authenticated by the agent's key."""

    def __init__(self, url: str, key: str, *, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/") + "/api/v1/agent",
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise ServerError(f"{method} {path}: {response.status_code} {message}")
        return response

    async def claim(self, lease_seconds: int, wait_seconds: float = 0) -> ClaimedTask | None:
        """Claim the next pending task of the agent's cluster, waiting up to ``wait_seconds`` for one."""
        response = await self._call(
            "POST",
            "/claim",
            json={"lease_seconds": lease_seconds, "wait_seconds": wait_seconds},
            timeout=wait_seconds + 30,
        )
        if response.status_code == 204:
            return None
        return ClaimedTask.model_validate(response.json())

    async def renew_lease(self, task_id: int, lease_seconds: int) -> None:
        await self._call("POST", f"/tasks/{task_id}/lease", json={"lease_seconds": lease_seconds})

    async def add_step(self, task_id: int, name: str) -> int:
        response = await self._call("POST", f"/tasks/{task_id}/steps", json={"name": name})
        return int(response.json()["id"])

    async def add_note(self, step_id: int, note: str) -> None:
        await self._call("POST", f"/steps/{step_id}/notes", json={"note": note})

    async def set_flow_run(self, step_id: int, flow_run_id: str) -> None:
        await self._call("PUT", f"/steps/{step_id}/flow-run", json={"flow_run_id": flow_run_id})

    async def end_step(self, step_id: int, error: str | None) -> None:
        await self._call("POST", f"/steps/{step_id}/end", json={"error": error})

    async def end_task(self, task_id: int, error: str | None, result: dict[str, Any] | None) -> None:
        await self._call("POST", f"/tasks/{task_id}/end", json={"error": error, "result": result})

    async def driver_archive(self, name: str, version: str) -> bytes:
        response = await self._call("GET", f"/drivers/{name}/versions/{version}/archive")
        return response.content

    async def report_components(self, deployment: str, components: list[dict[str, Any]]) -> None:
        await self._call("PUT", f"/deployments/{deployment}/components", json={"components": components})
