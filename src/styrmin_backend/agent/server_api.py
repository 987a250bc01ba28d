"""The agent's client of the Styrmin server: the only way the agent reaches the control plane."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from styrmin_backend.agent.failures import StepFailed
from styrmin_backend.domain.outages import retry_delay
from styrmin_backend.domain.plan import PLAN_VERSION
from styrmin_backend.protocol import Claim, ComponentStatus, HelmLockAnswer, TaskResult

log = logging.getLogger("styrmin.agent")

DEFAULT_RETRY_SECONDS = 90.0
"""How long a call that must land waits for a server (and its database) by default."""
END_RETRY_FACTOR = 3
"""A task's or step's end waits three times as long: the server takes an agent's late end (its
account of the failure wins over the lease's), so giving up early only loses the true error."""
PRESENCE_READ_TIMEOUT_SECONDS = 45.0
"""How long the presence connection waits for a line: three of the server's 15 s heartbeats."""
_FAIL_OVER_STATUSES = frozenset({502, 503, 504})
"""Answers after which the next server is tried: this one (or its database) cannot serve now."""


def parse_server_urls(urls: str | Sequence[str]) -> list[str]:
    """The servers' base URLs: a comma-separated ``STYRMIN_AGENT_SERVER_URL`` or a list, without a
    trailing ``/``; raises ValueError naming a URL that is not http(s)."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    found = [item.strip().rstrip("/") for item in items if item.strip()]
    if not found:
        raise ValueError("No Styrmin server URL: set STYRMIN_AGENT_SERVER_URL (several: comma-separated).")
    for url in found:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f'"{url}" is not an http:// or https:// URL of a Styrmin server.')
    return found


def _clock(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%H:%M:%S UTC")


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

    @property
    def server_away(self) -> bool:
        """No server answered, or it (or its database) could not serve: worth waiting for."""
        return self.status_code is None or self.status_code >= 500


class StyrminAway(ServerError, StepFailed):
    """No server served a call within the retry time; the message names what was away, from when to when.

    A step that meets it fails with that message, as any failed step does.
    """


def describe_error(error: BaseException) -> str:
    """An exception as a person reads it: never empty (``httpx.ReadTimeout()`` has no message)."""
    message = str(error).strip()
    name = type(error).__name__
    return f"{name}: {message}" if message and message != name else name


class ServerApi:
    """Calls of the agent protocol (``/api/v1/agent``), authenticated by the agent's key.

    With several servers (of one database), a call goes to the one that answered last, and to the
    next when that one cannot be reached or cannot serve. Calls the agent's tasks depend on (a step's
    start and end, notes, a task's end) wait for a server for ``retry_seconds``; they are safe to
    send twice (the server records them once). So while no server serves, a task starts no new step.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        key: str,
        *,
        timeout: float = 30.0,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        instance: str | None = None,
    ) -> None:
        self.urls = parse_server_urls(urls)
        self.retry_seconds = retry_seconds
        self.instance = instance
        """This agent process's name for the server: its claims carry it, its presence connection
        (:meth:`stay_present`) is opened in its name."""
        self._servers = [
            httpx.AsyncClient(
                base_url=url + "/api/v1/agent", headers={"Authorization": f"Bearer {key}"}, timeout=timeout
            )
            for url in self.urls
        ]
        self._current = 0
        self._announced: int | None = None
        self._plan_at_claim = True
        """Whether claims ask the server to start the first step (until a server refuses the field)."""
        self._helm_lock_at_claim = True
        """Whether claims ask the server for the Helm lock of a first step that is a Helm operation."""

    @property
    def url(self) -> str:
        """The server the agent uses now."""
        return self.urls[self._current]

    async def close(self) -> None:
        for server in self._servers:
            await server.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One try of a call: the current server, then each other one when it cannot serve."""
        last: ServerError | None = None
        for offset in range(len(self.urls)):
            index = (self._current + offset) % len(self.urls)
            try:
                response = await self._call_server(index, method, path, **kwargs)
            except ServerError as error:
                if error.status_code is not None and error.status_code not in _FAIL_OVER_STATUSES:
                    raise
                last = error
                continue
            self._use(index)
            return response
        assert last is not None
        raise last

    def _use(self, index: int) -> None:
        if index != self._announced:
            how = "" if self._announced is None else f" (instead of {self.urls[self._announced]})"
            log.info("Claiming from and reporting to the Styrmin server at %s%s", self.urls[index], how)
            self._current = self._announced = index

    async def _call_server(self, index: int, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = self.urls[index]
        try:
            response = await self._servers[index].request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ServerError(
                f"The Styrmin server at {url} did not answer {method} {path}: {describe_error(error)}"
            ) from error
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            where = f" (server {url})" if len(self.urls) > 1 or response.status_code >= 500 else ""
            raise ServerError(
                f"{method} {path}: {response.status_code} {message}{where}", response.status_code
            )
        return response

    async def _call_retrying(
        self, method: str, path: str, *, seconds: float | None = None, **kwargs: Any
    ) -> tuple[httpx.Response, str | None]:
        """``_call``, tried again with backoff while no server serves, for ``seconds`` (default
        ``retry_seconds``); returns the answer and, when it had to wait, a note saying for what."""
        seconds = self.retry_seconds if seconds is None else seconds
        began = time.time()
        deadline = time.monotonic() + seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._call(method, path, **kwargs)
            except ServerError as error:
                if not error.server_away:
                    raise
                delay = retry_delay(attempt)
                if time.monotonic() + delay > deadline:
                    raise StyrminAway(
                        f"Styrmin could not serve the agent from {_clock(began)} to {_clock(time.time())} "
                        f"({time.time() - began:.0f} s, the agent's retry time): {error}. "
                        "Check the Styrmin servers and their database, then request the change again."
                    ) from error
                if attempt == 1:
                    log.warning(
                        "Waiting up to %.0f s for Styrmin to serve %s %s: %s", seconds, method, path, error
                    )
                await asyncio.sleep(delay)
                continue
            if attempt == 1:
                return response, None
            waited = time.time() - began
            log.info("Styrmin serves %s %s again, after %.0f s (at %s)", method, path, waited, self.url)
            return response, f"from {_clock(began)} to {_clock(time.time())} ({waited:.0f} s)"

    async def claim(
        self, lease_seconds: int, wait_seconds: float = 0, *, started_by_actions_only: bool = False
    ) -> Claim | None:
        """Claim the next pending task of the agent's cluster, waiting up to ``wait_seconds`` for one.

        With ``started_by_actions_only``, only a task that an action started (see docs/agent.md). The
        server starts the task's first step with the claim (``Claim.first_step``), and takes the
        release's Helm lock for a first step that is a Helm operation (``Claim.helm_lock``, with
        ``lease_seconds``), unless it predates that.
        """
        body: dict[str, Any] = {
            "lease_seconds": lease_seconds,
            "wait_seconds": wait_seconds,
            "started_by_actions_only": started_by_actions_only,
        }
        if self.instance is not None:
            body["instance"] = self.instance
        if self._plan_at_claim:
            body["plan_version"] = PLAN_VERSION
            if self._helm_lock_at_claim:
                body["helm_lock_lease_seconds"] = lease_seconds
        while True:
            try:
                response = await self._call("POST", "/claim", json=body, timeout=wait_seconds + 30)
                break
            except ServerError as refused:
                if refused.status_code != 422:
                    raise
                # A server older than a field refuses it, naming it: the agent does that part itself.
                # The Helm lock comes with the first step only: without plan_version, neither is asked.
                if "plan_version" in body and "plan_version" in str(refused):
                    log.info(
                        "The server does not start claimed tasks' first steps (%s); the agent does.", refused
                    )
                    self._plan_at_claim = False
                    del body["plan_version"]
                    body.pop("helm_lock_lease_seconds", None)
                elif "instance" in body and "instance" in str(refused):
                    log.info("The server does not know agents' instances (%s); leases alone count.", refused)
                    self.instance = None
                    del body["instance"]
                elif body.pop("helm_lock_lease_seconds", None) is not None:
                    log.info("The server takes no Helm lock with a claim (%s); the agent does.", refused)
                    self._helm_lock_at_claim = False
                else:
                    raise
        if response.status_code == 204:
            return None
        return Claim.model_validate(response.json())

    async def renew_lease(self, task_id: int, lease_seconds: int) -> None:
        """Extend the lease of a task the agent runs; raises ServerError (``task_lost``) when it lost it."""
        await self._call("POST", f"/tasks/{task_id}/lease", json={"lease_seconds": lease_seconds}, timeout=10)

    async def add_step(self, task_id: int, name: str) -> int:
        """Start a step; while no server serves, wait (the step, and its actions, start later).

        After a wait, the step's notes say how long it was held and why.
        """
        response, waited = await self._call_retrying("POST", f"/tasks/{task_id}/steps", json={"name": name})
        step_id = int(response.json()["id"])
        if waited is not None:
            await self.add_note(
                step_id, f"The agent held this step until Styrmin could serve it again, {waited}."
            )
        return step_id

    async def add_note(self, step_id: int, note: str) -> None:
        await self._call_retrying("POST", f"/steps/{step_id}/notes", json={"note": note})

    async def set_flow_run(self, step_id: int, flow_run_id: str) -> None:
        await self._call_retrying("PUT", f"/steps/{step_id}/flow-run", json={"flow_run_id": flow_run_id})

    async def end_step(self, step_id: int, error: str | None) -> None:
        await self._call_retrying(
            "POST",
            f"/steps/{step_id}/end",
            json={"error": error},
            seconds=END_RETRY_FACTOR * self.retry_seconds,
        )

    async def end_task(
        self,
        task_id: int,
        error: str | None,
        result: TaskResult | None,
        components: list[ComponentStatus] | None = None,
        last_step_id: int | None = None,
        release_helm_locks: bool = False,
    ) -> None:
        """End a task; with ``components``, the deployment's component workloads are recorded with it,
        with ``last_step_id`` that step ends succeeded first (for a task that succeeds), and with
        ``release_helm_locks`` the task's Helm locks are let go of."""
        body: dict[str, Any] = {"error": error, "result": (result.as_json() if result else None) or None}
        if components is not None:
            body["components"] = [c.model_dump(mode="json") for c in components]
        if last_step_id is not None:
            body["last_step_id"] = last_step_id
        if release_helm_locks:
            body["release_helm_locks"] = True
        await self._call_retrying(
            "POST", f"/tasks/{task_id}/end", json=body, seconds=END_RETRY_FACTOR * self.retry_seconds
        )

    async def driver_archive(self, name: str, version: str) -> bytes:
        response, _waited = await self._call_retrying("GET", f"/drivers/{name}/versions/{version}/archive")
        return response.content

    async def report_components(self, deployment: str, components: list[ComponentStatus]) -> None:
        body = {"components": [c.model_dump(mode="json") for c in components]}
        await self._call_retrying("PUT", f"/deployments/{deployment}/components", json=body)

    async def next_location_check(self, wait_seconds: float = 0) -> tuple[int, dict[str, Any]] | None:
        """The next backup location of the agent's cluster to check: its id and location, or None
        once none came within ``wait_seconds`` (a long poll)."""
        response = await self._call(
            "GET",
            "/backup-location-checks",
            params={"wait_seconds": wait_seconds},
            timeout=wait_seconds + 30,
        )
        if response.status_code == 204:
            return None
        body = response.json()
        return int(body["id"]), dict(body["location"])

    async def record_location_check(self, location_id: int, error: str | None) -> None:
        await self._call_retrying("POST", f"/backup-location-checks/{location_id}", json={"error": error})

    async def acquire_helm_lock(
        self, task_id: int, namespace: str, release: str, lease_seconds: int
    ) -> HelmLockAnswer:
        """Take the lock of a release's Helm operation for the task, or learn which task holds it.

        Safe to send again (a lock the task holds is its own), so it waits out an outage: no Helm
        operation starts while no server serves.
        """
        body = {"namespace": namespace, "release": release, "lease_seconds": lease_seconds}
        response, _waited = await self._call_retrying(
            "POST", f"/tasks/{task_id}/helm-lock", json=body, timeout=10
        )
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

    async def stay_present(self) -> None:
        """Hold this process's presence connection to a server open, until cancelled.

        While it is open, the server knows this process runs. Should the process crash or be killed,
        its connection closes with it, and the server ends the tasks it ran after a few seconds
        (``agent_gone_seconds``) instead of when their leases run out. When the connection ends (a
        server stopping, a proxy, a network error), it is opened again within half a second, on the
        next server if there are several, then with backoff while none answers. A server that
        predates it (404) is asked again a minute later; the leases count meanwhile.
        """
        if self.instance is None:
            return
        path = f"/instances/{self.instance}/presence"
        index, attempt = self._current, 0
        while True:
            try:
                async with self._servers[index].stream(
                    "GET", path, timeout=httpx.Timeout(10.0, read=PRESENCE_READ_TIMEOUT_SECONDS)
                ) as response:
                    if response.status_code == 404:
                        log.info(
                            "The server at %s keeps no presence connections; asking again in a minute",
                            self.urls[index],
                        )
                        await asyncio.sleep(60)
                        continue
                    if response.status_code >= 400:
                        message = (await response.aread()).decode(errors="replace")
                        raise ServerError(
                            f"GET {path}: {response.status_code} {message}", response.status_code
                        )
                    attempt = 0
                    async for _heartbeat in response.aiter_lines():
                        pass
                why = "ended by the server's side (a server stopping, a proxy)"
            except Exception as error:  # a network error, a server stopping or refusing: open it again
                why = describe_error(error)
            attempt += 1
            if attempt == 1 or attempt % 20 == 0:
                log.info("The presence connection to %s closed (%s); opening it again", self.urls[index], why)
            # The next server, if there are several: the one that closed it may be stopping.
            index = (index + 1) % len(self.urls)
            await asyncio.sleep(retry_delay(attempt))
