"""The FastAPI application of the Styrmin server."""

from __future__ import annotations

import threading

from fastapi import APIRouter, FastAPI
from sqlalchemy import Engine

from styrmin_backend.api.deps import API_PREFIX
from styrmin_backend.api.errors import ERROR_RESPONSES, install_error_handlers
from styrmin_backend.api.routes import agent, agents, auth, deployments, drivers, tasks, users
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
    # Set when the server is about to stop: agents' long polls then answer at once.
    app.state.stopping = threading.Event()
    install_error_handlers(app)

    api = APIRouter(prefix=API_PREFIX, responses=ERROR_RESPONSES)
    for module in (auth, users, drivers, deployments, tasks, agents, agent):
        api.include_router(module.router)
    app.include_router(api)
    install_web(app)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
