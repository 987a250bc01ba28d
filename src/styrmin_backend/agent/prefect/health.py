"""Whether the Prefect server the actions run on answers, and how an outage reads in an error.

Actions run as Prefect flow runs: without the Prefect server they can neither start nor record their
end. The agent watches it, claims no new work while it is away, stops the actions that run when it
goes away (they would otherwise wait minutes on Prefect's retries), and starts again by itself when it
is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

log = logging.getLogger("styrmin.agent")

HEALTH_TIMEOUT_SECONDS = 5.0
"""How long one health check waits for the Prefect server's answer."""


def prefect_unreachable_error(api_url: str, cause: str) -> str:
    """The error of work that could not run or finish because the Prefect server was away."""
    return (
        f"The Prefect server at {api_url} is not reachable: {cause}. Actions run as Prefect flow runs, "
        "so Styrmin could not run or finish them. Once the Prefect server is back, look at the "
        "deployment and request the change again."
    )


async def prefect_down_reason(
    api_url: str,
    timeout: float = HEALTH_TIMEOUT_SECONDS,
    *,
    slow_is_down: bool = False,
    client: httpx.AsyncClient | None = None,
) -> str | None:
    """Why the Prefect server at ``api_url`` cannot be used now; None when it answers.

    A server that takes the connection but is slow to answer is busy, not away: on a loaded machine
    its health check can take seconds, and stopping actions then would do harm. After an outage
    (``slow_is_down``) only a real answer counts as back: a server still starting is slow too.

    ``client``: an open client to send the check with (kept by a caller that checks often: a new
    client loads the CA bundle, tens of milliseconds of the event loop's time); default: a new one.
    """
    try:
        if client is None:
            async with httpx.AsyncClient(timeout=timeout) as own:
                response = await own.get(f"{api_url.rstrip('/')}/health")
        else:
            response = await client.get(f"{api_url.rstrip('/')}/health", timeout=timeout)
    except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as error:
        return f"its health check did not answer in time ({type(error).__name__})" if slow_is_down else None
    except httpx.HTTPError as error:
        message = str(error).strip()
        return f"{type(error).__name__}: {message}" if message else type(error).__name__
    if response.status_code != 200:
        return f"its health check answered {response.status_code}"
    return None


class PrefectWatch:
    """The agent's view of its Prefect server: up, or away since when and why.

    Args:
        api_url: the Prefect server's API URL.
        check_seconds: how often :meth:`watch` checks it.
        outage_seconds: how long it must stay unreachable before it counts as away (a blip of a
            busy server is not an outage).
        on_back: awaited once each time it is back after an outage.
    """

    def __init__(
        self,
        api_url: str,
        *,
        check_seconds: float,
        outage_seconds: float,
        on_back: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.api_url = api_url
        self._check_seconds = check_seconds
        self._outage_seconds = outage_seconds
        self._on_back = on_back
        self._failing_since: float | None = None
        self._answered_at: float | None = None
        """When (monotonic) the server last answered a check."""
        self._away_since_wall: float | None = None
        self.reason: str | None = None
        """Why the Prefect server is away; None while it is up."""
        self.away = asyncio.Event()
        """Set while the Prefect server is away: running actions stop, waiting on it."""
        self._client: httpx.AsyncClient | None = None
        """Kept for every check (the agent checks before each claim); made on the first."""

    async def close(self) -> None:
        """Close the connection the checks use."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def error(self) -> str | None:
        """The error for work the outage stops; None while the Prefect server is up."""
        return None if self.reason is None else prefect_unreachable_error(self.api_url, self.reason)

    async def check(self, *, fresh_for: float = 0.0) -> str | None:
        """Check the Prefect server now; returns why it did not answer, or None when it did.

        It counts as away (``reason``, ``away``) once it has not answered for ``outage_seconds``.
        ``fresh_for``: an answer less than that many seconds old stands, with no request (the
        agent checks before every claim, and a change's nested tasks are claimed one after another).
        """
        answered = self._answered_at
        if (
            fresh_for > 0
            and self._failing_since is None
            and answered is not None
            and time.monotonic() - answered < fresh_for
        ):
            return None
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=HEALTH_TIMEOUT_SECONDS)
        reason = await prefect_down_reason(
            self.api_url, slow_is_down=self.reason is not None, client=self._client
        )
        now = time.monotonic()
        if reason is None:
            if self.reason is not None:
                log.warning("The Prefect server at %s is back; the agent claims tasks again.", self.api_url)
                away_since, self.reason = self._away_since_wall, None
                self.away.clear()
                if self._on_back is not None and away_since is not None:
                    try:
                        await self._on_back(away_since)
                    except Exception as error:  # recovery is best effort; the agent serves anyway
                        log.warning("Could not tidy up after the Prefect outage: %s", error)
            self._failing_since = None
            self._answered_at = now
            return None
        if self._failing_since is None:
            self._failing_since = now
        if self.reason is None and now - self._failing_since >= self._outage_seconds:
            self.reason = reason
            self._away_since_wall = time.time() - (now - self._failing_since)
            self.away.set()
            log.error(
                "%s The agent stops the actions that run and claims no task until it is back.",
                prefect_unreachable_error(self.api_url, reason),
            )
        elif self.reason is not None:
            self.reason = reason
        return reason

    async def watch(self, stop: asyncio.Event, busy: Callable[[], bool] = lambda: True) -> None:
        """Check every ``check_seconds`` until ``stop`` is set, while ``busy()`` (actions run: an
        outage must stop them) or while the server is failing; an idle agent's checks before each
        claim are enough, and cost an idle stack nothing more."""
        while not stop.is_set():
            try:
                if busy() or self._failing_since is not None:
                    await self.check(fresh_for=self._check_seconds)
            except Exception as error:  # the watch must never stop the agent
                log.warning("Could not check the Prefect server at %s: %s", self.api_url, error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._check_seconds)
