"""The backup location page of a cluster: every signed-in user sees where backups go; an Admin sets it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from styrmin_backend.domain.backup_locations import check_location
from styrmin_backend.domain.errors import DomainError
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import backup_locations
from styrmin_backend.services.backup_locations import StoredLocation
from styrmin_backend.web._common import (
    Form,
    Viewer,
    WebRoute,
    check_form,
    render,
    see_other,
    status_of,
    text,
    unit,
    viewer_of,
)
from styrmin_backend.web._forms import FormErrors, place_error

router = APIRouter(route_class=WebRoute, include_in_schema=False)
_FIELDS = ("kind", "folder", "bucket", "prefix", "endpoint_url", "region", "secret")


def location_view(row: StoredLocation | None) -> dict[str, object] | None:
    """A location as pages show it: where, its Secret's reference, never credentials."""
    if row is None:
        return None
    return {
        "id": row.id,
        "description": row.where.describe(),
        "secret": row.where.secret_reference,
        "status": row.status,
        "error": row.error,
        "requested_by": row.requested_by,
        "requested_at": row.requested_at,
    }


def _render(
    request: Request,
    viewer: Viewer,
    session: Session,
    cluster: str,
    *,
    errors: FormErrors | None = None,
    fields: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    found = backup_locations.location_of(session, cluster)
    return render(
        request,
        "backup_location.html",
        viewer,
        status_code,
        cluster=cluster,
        in_use=location_view(found.in_use),
        latest=location_view(found.latest),
        checking=found.latest is not None and found.latest.status == "checking",
        errors=errors or FormErrors(),
        fields=fields or {"kind": "folder"},
    )


@router.get("/clusters/{cluster}/backup-location")
def location_page(request: Request, cluster: str) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        return _render(request, viewer, session, cluster)


@router.post("/clusters/{cluster}/backup-location")
def set_location(request: Request, cluster: str, form: Form) -> Response:
    fields = {name: text(form, name).strip() for name in _FIELDS}
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.ADMIN)
        try:
            location = check_location(
                fields["kind"],
                **{name: fields[name] or None for name in _FIELDS if name != "kind"},  # type: ignore[arg-type]
            )
            backup_locations.set_location(session, cluster, location, by=viewer.principal)
        except DomainError as error:
            session.rollback()
            errors = FormErrors()
            place_error(error, errors, {name: name for name in _FIELDS})
            return _render(
                request, viewer, session, cluster, errors=errors, fields=fields, status_code=status_of(error)
            )
    return see_other(f"/clusters/{cluster}/backup-location")
