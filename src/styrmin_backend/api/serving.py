"""Serving the app with uvicorn, stopping gracefully on SIGTERM or SIGINT."""

from __future__ import annotations

import math
from types import FrameType

import uvicorn
from fastapi import FastAPI

from styrmin_backend.settings import Settings

KEEP_ALIVE_SECONDS = 65
"""How long an idle connection stays open: longer than clients keep theirs (httpx: 5 s, load balancers:
60 s), so a client never sends a request on a connection the server is closing at that moment."""


def server_config(app: FastAPI, settings: Settings, **options: object) -> uvicorn.Config:
    """uvicorn's configuration for serving ``app``: Styrmin's host, port, log level and keep-alive."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        **options,  # type: ignore[arg-type]
    )


def announce_stop(app: FastAPI) -> None:
    """The server is stopping: readiness fails from now on, and the agents' waiting claims answer at once."""
    app.state.stopping.set()
    app.state.claim_wakeups.wake_all()
    app.state.location_waiters.wake_all()
    app.state.presence_waiters.wake_all()


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app as soon as it is asked to stop."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Readiness fails and agents' long polls answer now, so no request holds the stop up.
        announce_stop(self._app)
        super().handle_exit(sig, frame)


def serve_until_stopped(app: FastAPI, settings: Settings) -> None:
    """Serve ``app`` until a signal: stop accepting, let requests in flight end (up to the grace), exit."""
    config = server_config(
        app,
        settings,
        log_config=None,  # keep the log format configure_logging set
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds),  # 0: cancel at once
        proxy_headers=True,
    )
    _Server(config, app).run()
