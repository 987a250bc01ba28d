"""The task view and its live part."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from styrmin_backend.web import _views
from styrmin_backend.web._common import (
    WebRoute,
    prefect_ui_url,
    render,
    unit,
    viewer_of,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


@router.get("/tasks/{task_id}")
def task_page(request: Request, task_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        view = _views.load_task_view(session, task_id, prefect_ui_url(request))
        return render(request, "task.html", viewer, view=view)


@router.get("/tasks/{task_id}/live")
def task_live(request: Request, task_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> HTMLResponse:
    """The task's status and steps, polled by the page while the task runs."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        view = _views.load_task_view(session, task_id, prefect_ui_url(request))
        return render(request, "_task_live.html", viewer, view=view)
