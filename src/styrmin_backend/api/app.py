"""The REST API under /api/v1, installed on the server's app (see ``styrmin_backend.server_app``)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

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


def install_api(app: FastAPI) -> None:
    """Add the API's routes, the health checks and the API's error answers to ``app``."""
    install_error_handlers(app)
    api = APIRouter(prefix=API_PREFIX, responses=ERROR_RESPONSES)
    for module in (auth, users, drivers, deployments, backups, backup_locations, tasks, agents, agent):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(health.router)
