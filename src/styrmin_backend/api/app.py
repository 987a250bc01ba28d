"""The REST API under /api/v1, installed on the server's app (see ``styrmin_backend.server_app``)."""

from __future__ import annotations

from fastapi import FastAPI

from styrmin_backend.api.errors import install_error_handlers
from styrmin_backend.api.openapi import install_openapi, mark_routes
from styrmin_backend.api.routes import (
    agent,
    agents,
    auth,
    backup_locations,
    backups,
    deployments,
    drivers,
    health,
    previews,
    task_logs,
    tasks,
    users,
)

ROUTES = [
    route
    for module in (
        auth,
        users,
        drivers,
        deployments,
        previews,
        task_logs,
        backups,
        backup_locations,
        tasks,
        agents,
        agent,
        health,
    )
    for route in module.router.routes
]
"""Every route of the API, built once per process: each router carries its own prefix and error answers."""
mark_routes(ROUTES)


def install_api(app: FastAPI) -> None:
    """Add the API's routes, the health checks and the API's error answers to ``app``.

    The routes are added as they are rather than with ``include_router``, which builds every route's
    parameters and models again for each app (a quarter of a second of CPU an app; the tests make an
    app per test). A route keeps nothing of the app: it reads the app's state from the request.
    """
    install_error_handlers(app)
    app.router.routes.extend(ROUTES)
    install_openapi(app)
