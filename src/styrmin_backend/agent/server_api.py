"""The agent's client of the Styrmin server: the only way the agent reaches the control plane."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from styrmin_backend.protocol import Claim, ComponentStatus, HelmLockAnswer, TaskResult

log = logging.getLogger("styrmin.agent")

_RETRY_ATTEMPTS = 6
_RETRY_FIRST_DELAY_SECONDS = 1.0
"""A call that must land is tried 6 times over about 30 s (1, 2, 4, 8, 10 s apart)."""


class ServerError(Exception):
    """The server refused or failed an agent call, or could not be reached; the message says which."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code

    @property
    def task_lost(self) -> bool:
        """The server says the agent no longer holds the task (it ended, or another agent has it)."""
        return self.status_code in (404, 409, 410)

    @property
    def task_cancelled(self) -> bool:
        """The server says the task was cancelled: stop its work and leave the cluster as it is."""
        return self.status_code == 410


def describe_error(error: BaseException) -> str:
    """An exception as a person reads it: never empty (``httpx.ReadTimeout()`` has no message)."""
    message = str(error).strip()
    name = type(error).__name__
    return f"{name}: {message}" if message and message != name else name


class ServerApi:
    """Calls of the agent protocol (``/api/v1/agent``), authenticated by the agent's key."""

    def __init__(self, url: str, key: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/") + "/api/v1/agent",
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def _call_retrying(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """``_call``, tried again for a while when the server could not be reached or failed (5xx).

        For calls that must land for the task to end as it did (a step's or the task's end): a server
        restarting or busy for a few seconds must not turn a finished task into "the agent stopped".
        """
        delay = _RETRY_FIRST_DELAY_SECONDS
        for _ in range(_RETRY_ATTEMPTS - 1):
            try:
                return await self._call(method, path, **kwargs)
            except ServerError as error:
                if error.status_code is not None and error.status_code < 500:
                    raise
                log.warning("%s; trying again in %.0f s.", error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        return await self._call(method, path, **kwargs)

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ServerError(
                f"The Styrmin server at {self.url} did not answer {method} {path}: {describe_error(error)}"
            ) from error
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise ServerError(f"{method} {path}: {response.status_code} {message}", response.status_code)
        return response

    async def claim(
        self, lease_seconds: int, wait_seconds: float = 0, *, started_by_actions_only: bool = False
    ) -> Claim | None:
        """Claim the next pending task of the agent's cluster, waiting up to ``wait_seconds`` for one.

        With ``started_by_actions_only``, only a task that an action started (see docs/agent.md).
        """
        response = await self._call(
            "POST",
            "/claim",
            json={
                "lease_seconds": lease_seconds,
                "wait_seconds": wait_seconds,
                "started_by_actions_only": started_by_actions_only,
            },
            timeout=wait_seconds + 30,
        )
        if response.status_code == 204:
            return None
        return Claim.model_validate(response.json())

    async def renew_lease(self, task_id: int, lease_seconds: int) -> None:
        """Extend the lease of a task the agent runs; raises ServerError (``task_lost``) when it lost it."""
        await self._call("POST", f"/tasks/{task_id}/lease", json={"lease_seconds": lease_seconds}, timeout=10)

    async def add_step(self, task_id: int, name: str) -> int:
        response = await self._call("POST", f"/tasks/{task_id}/steps", json={"name": name})
        return int(response.json()["id"])

    async def add_note(self, step_id: int, note: str) -> None:
        await self._call("POST", f"/steps/{step_id}/notes", json={"note": note})

    async def set_flow_run(self, step_id: int, flow_run_id: str) -> None:
        await self._call("PUT", f"/steps/{step_id}/flow-run", json={"flow_run_id": flow_run_id})

    async def end_step(self, step_id: int, error: str | None) -> None:
        await self._call_retrying("POST", f"/steps/{step_id}/end", json={"error": error})

    async def end_task(
        self,
        task_id: int,
        error: str | None,
        result: TaskResult | None,
        components: list[ComponentStatus] | None = None,
    ) -> None:
        """End a task; with ``components``, the deployment's component workloads are recorded with it."""
        body: dict[str, Any] = {"error": error, "result": (result.as_json() if result else None) or None}
        if components is not None:
            body["components"] = [c.model_dump(mode="json") for c in components]
        await self._call_retrying("POST", f"/tasks/{task_id}/end", json=body)

    async def driver_archive(self, name: str, version: str) -> bytes:
        response = await self._call("GET", f"/drivers/{name}/versions/{version}/archive")
        return response.content

    async def report_components(self, deployment: str, components: list[ComponentStatus]) -> None:
        body = {"components": [c.model_dump(mode="json") for c in components]}
        await self._call("PUT", f"/deployments/{deployment}/components", json=body)

    async def next_location_check(self) -> tuple[int, dict[str, Any]] | None:
        """The next backup location of the agent's cluster to check: its id and location, or None."""
        response = await self._call("GET", "/backup-location-checks", timeout=30)
        if response.status_code == 204:
            return None
        body = response.json()
        return int(body["id"]), dict(body["location"])

    async def record_location_check(self, location_id: int, error: str | None) -> None:
        await self._call_retrying("POST", f"/backup-location-checks/{location_id}", json={"error": error})

    async def acquire_helm_lock(
        self, task_id: int, namespace: str, release: str, lease_seconds: int
    ) -> HelmLockAnswer:
        """Take the lock of a release's Helm operation for the task, or learn which task holds it."""
        body = {"namespace": namespace, "release": release, "lease_seconds": lease_seconds}
        response = await self._call("POST", f"/tasks/{task_id}/helm-lock", json=body, timeout=10)
        return HelmLockAnswer.model_validate(response.json())

    async def renew_helm_lock(self, task_id: int, namespace: str, release: str, lease_seconds: int) -> None:
        """Extend the lease of the task's Helm lock; raises ServerError (409) when it lost it."""
        body = {"namespace": namespace, "release": release, "lease_seconds": lease_seconds}
        await self._call("POST", f"/tasks/{task_id}/helm-lock/renew", json=body, timeout=10)

    async def release_helm_lock(self, task_id: int, namespace: str, release: str) -> None:
        """Let go of the task's Helm lock once its Helm operation ended."""
        body = {"namespace": namespace, "release": release}
        await self._call_retrying("POST", f"/tasks/{task_id}/helm-lock/release", json=body)

    async def cancelled_in_prefect(self, task_id: int, flow_run_id: str) -> None:
        """Cancel the task because a flow run of its actions was cancelled in the Prefect UI."""
        await self._call_retrying(
            "POST", f"/tasks/{task_id}/cancelled-in-prefect", json={"flow_run_id": flow_run_id}
        )

    async def work_stopped(self, task_id: int) -> None:
        """Tell the server that the work of a cancelled task has stopped."""
        await self._call_retrying("POST", f"/tasks/{task_id}/stopped")
