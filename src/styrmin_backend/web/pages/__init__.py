"""The pages and form endpoints of the web UI, a module per concern; pages call the services in-process."""

from __future__ import annotations

from fastapi import APIRouter

from styrmin_backend.web.pages import (
    agents,
    backup_locations,
    backups,
    deployments,
    drivers,
    signing_in,
    tasks,
    users,
)

router = APIRouter()
for _module in (signing_in, deployments, backups, backup_locations, tasks, users, drivers, agents):
    router.include_router(_module.router)

__all__ = ["router"]
