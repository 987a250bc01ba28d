"""The pages and form endpoints of the web UI, a module per concern; pages call the services in-process."""

from __future__ import annotations

from starlette.routing import BaseRoute

from styrmin_backend.web.pages import (
    agents,
    backup_locations,
    backups,
    deployments,
    drivers,
    revisions,
    signing_in,
    tasks,
    users,
)

ROUTES: list[BaseRoute] = [
    route
    for module in (
        signing_in,
        deployments,
        revisions,
        backups,
        backup_locations,
        tasks,
        users,
        drivers,
        agents,
    )
    for route in module.router.routes
]
"""Every page and form endpoint, built once per process (the modules' routers have no prefix)."""

__all__ = ["ROUTES"]
