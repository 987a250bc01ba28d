"""The drivers page."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from styrmin_backend.web import _views
from styrmin_backend.web._common import (
    WebRoute,
    render,
    unit,
    viewer_of,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


@router.get("/drivers")
def drivers_page(request: Request) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        return render(request, "drivers.html", viewer, drivers=_views.driver_views(session))
