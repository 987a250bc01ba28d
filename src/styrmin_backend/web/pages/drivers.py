"""The drivers page: every stored version; Read/write users push a new one from a .tar.gz."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session
from starlette.datastructures import UploadFile

from styrmin_backend.domain.errors import DomainError
from styrmin_backend.domain.limits import DRIVER_ARCHIVE_MAX_BYTES
from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import DriverReport
from styrmin_backend.services import drivers
from styrmin_backend.web import _views
from styrmin_backend.web._common import (
    Form,
    Viewer,
    WebRoute,
    check_form,
    render,
    status_of,
    unit,
    viewer_of,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


def _render(
    request: Request,
    viewer: Viewer,
    session: Session,
    *,
    report: DriverReport | None = None,
    error: str = "",
    notice: str = "",
    status_code: int = 200,
) -> HTMLResponse:
    return render(
        request,
        "drivers.html",
        viewer,
        status_code,
        drivers=_views.driver_views(session),
        report=report,
        push_error=error,
        notice=notice,
        max_mib=DRIVER_ARCHIVE_MAX_BYTES // (1024 * 1024),
    )


@router.get("/drivers")
def drivers_page(request: Request) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        return _render(request, viewer, session)


@router.post("/drivers")
def push_driver(request: Request, form: Form) -> Response:
    """Validate the uploaded archive like ``styrminctl drivers validate``, then store it."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
    upload = form.get("archive")
    if not isinstance(upload, UploadFile) or not upload.filename:
        return _refused(request, "Choose a driver archive (.tar.gz) to push.", None, 422)
    data = upload.file.read(DRIVER_ARCHIVE_MAX_BYTES + 1)
    if len(data) > DRIVER_ARCHIVE_MAX_BYTES:
        return _refused(
            request,
            f"The driver archive is larger than {DRIVER_ARCHIVE_MAX_BYTES // (1024 * 1024)} MiB.",
            None,
            413,
        )
    try:
        package, report = drivers.check_archive(data)  # slow, so outside the transaction
    except drivers.DriverChecksBusy as busy:
        refused = _refused(request, busy.message, None, 429)
        refused.headers["Retry-After"] = str(busy.retry_after)
        return refused
    if package is None or not report.valid:
        return _refused(request, "", report, 422)
    with unit(request) as session:
        try:
            pushed = drivers.push_driver(session, package, report, viewer.principal.username)
        except DomainError as error:
            session.rollback()
            return _refused(request, error.message, None, status_of(error))
        already = (
            "" if pushed.created else " It was already stored with the same content, so nothing changed."
        )
        return _render(
            request,
            viewer,
            session,
            notice=f"Pushed {package.name} {package.version}.{already}",
            status_code=201 if pushed.created else 200,
        )


def _refused(request: Request, error: str, report: DriverReport | None, status_code: int) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        return _render(request, viewer, session, report=report, error=error, status_code=status_code)
