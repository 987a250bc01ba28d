"""The FastAPI application of the Styrmin server."""

from __future__ import annotations

import threading

from fastapi import APIRouter, FastAPI
from sqlalchemy import Engine

from styrmin_backend.api.deps import API_PREFIX
from styrmin_backend.api.errors import ERROR_RESPONSES, install_error_handlers
from styrmin_backend.api.routes import (
    agent,
    agents,
    auth,
    backup_locations,
    backups,
    deployments,
    drivers,
    health,
    tasks,
    users,
)
from styrmin_backend.metrics import RequestMetrics, server_registry
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_session_factory
from styrmin_backend.web import install_web


def create_app(settings: Settings, engine: Engine) -> FastAPI:
    """The server's app on a migrated database ``engine``."""
    app = FastAPI(
        title="Styrmin",
        version="0.1.0",
        description="Deploy and upgrade applications on Kubernetes.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = make_session_factory(engine)
    app.state.metrics = server_registry(engine)
    # Set when the server is asked to stop: /readyz fails and agents' long polls answer at once.
    app.state.stopping = threading.Event()
    install_error_handlers(app)

    api = APIRouter(prefix=API_PREFIX, responses=ERROR_RESPONSES)
    for module in (auth, users, drivers, deployments, backups, backup_locations, tasks, agents, agent):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(health.router)
    install_web(app)
    app.add_middleware(RequestMetrics)
    return app
