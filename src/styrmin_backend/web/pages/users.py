"""The users page (changes: Admin only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from styrmin_backend.domain.errors import DomainError
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.services import users
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
from styrmin_backend.web._forms import (
    FormErrors,
    place_error,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)

_USER_FIELDS = {"username": "username", "password": "password", "role": "role"}
_NOTICES = {"password": "The password was set."}


def _render_users(
    request: Request,
    viewer: Viewer,
    session: Session,
    errors: FormErrors,
    fields: dict[str, str],
    status_code: int = 200,
    notice: str = "",
) -> HTMLResponse:
    return render(
        request,
        "users.html",
        viewer,
        status_code,
        users=users.list_users(session),
        roles=list(Role),
        errors=errors,
        fields=fields,
        notice=notice,
        actions_username=ACTIONS_USERNAME,
    )


@router.get("/users")
def users_page(request: Request, notice: str = "") -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        return _render_users(request, viewer, session, FormErrors(), {}, notice=_NOTICES.get(notice, ""))


@router.post("/users")
def create_user(request: Request, form: Form) -> Response:
    fields = {"username": text(form, "username").strip(), "role": text(form, "role")}
    errors = FormErrors()
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.ADMIN)
        try:
            users.create_user(session, fields["username"], Role(fields["role"]), text(form, "password"))
        except ValueError:
            errors.add("role", "Choose a role.")
        except DomainError as error:
            place_error(error, errors, _USER_FIELDS)
        if errors:
            session.rollback()
            return _render_users(request, viewer, session, errors, fields, 422)
    return see_other("/users")


def _user_change(request: Request, form: FormData, change: Any) -> Response:
    errors = FormErrors()
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.ADMIN)
        try:
            change(session, viewer)
        except DomainError as error:
            session.rollback()
            errors.add(None, error.message)
            return _render_users(request, viewer, session, errors, {}, status_of(error))
    return see_other("/users")


@router.post("/users/{username}/role")
def change_role(request: Request, username: str, form: Form) -> Response:
    try:
        role = Role(text(form, "role"))
    except ValueError:
        role = None
    return _user_change(request, form, lambda s, v: users.update_user(s, username, by=v.principal, role=role))


@router.post("/users/{username}/active")
def change_active(request: Request, username: str, form: Form) -> Response:
    active = text(form, "active") == "yes"
    return _user_change(
        request, form, lambda s, v: users.update_user(s, username, by=v.principal, is_active=active)
    )


@router.post("/users/{username}/password")
def set_password(request: Request, username: str, form: Form) -> Response:
    response = _user_change(
        request, form, lambda s, _v: users.set_password(s, username, text(form, "password"))
    )
    if response.status_code == 303:
        return see_other("/users?notice=password")
    return response
