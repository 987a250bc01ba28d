"""Logging in and out of the web UI."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from styrmin_backend.browser_session import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    client_address,
    set_session_cookies,
)
from styrmin_backend.domain.errors import NotAuthenticated, TooManyAttempts
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import auth
from styrmin_backend.web._common import (
    CSRF_FIELD,
    LOGIN_CSRF_COOKIE,
    Form,
    WebRoute,
    check_form,
    new_login_csrf,
    render,
    safe_next,
    see_other,
    text,
    unit,
    viewer_of,
)
from styrmin_backend.web._forms import (
    FormErrors,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


@router.get("/")
def home() -> Response:
    return see_other("/deployments")


@router.get("/login")
def login_page(request: Request, next: str = "/") -> Response:
    token = new_login_csrf()
    response = render(
        request, "login.html", None, login_csrf=token, next=safe_next(next), errors=FormErrors()
    )
    _set_login_csrf(request, response, token)
    return response


@router.post("/login")
def login(request: Request, form: Form) -> Response:
    sent, expected = text(form, CSRF_FIELD), request.cookies.get(LOGIN_CSRF_COOKIE, "")
    username, target = text(form, "username").strip(), safe_next(text(form, "next") or "/")
    errors = FormErrors()
    status, retry_after = 401, {}
    if not expected or sent != expected:
        errors.add(None, "The login form expired; log in again.")
    else:
        try:
            with unit(request) as session:
                user = auth.login(session, username, text(form, "password"), client_address(request))
                settings = request.app.state.settings
                issued = auth.issue_token(
                    session, user, auth.TokenKind.SESSION, settings.session_lifetime, name="web session"
                )
        except NotAuthenticated as error:
            errors.add(error.field if error.field in ("username", "password") else None, error.message)
        except TooManyAttempts as error:
            errors.add(None, error.message)
            status, retry_after = 429, {"Retry-After": str(error.retry_after)}
        else:
            redirect = see_other(target)
            set_session_cookies(redirect, issued.token, settings)
            redirect.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
            return redirect
    token = new_login_csrf()
    response = render(
        request, "login.html", None, status, login_csrf=token, next=target, errors=errors, username=username
    )
    response.headers.update(retry_after)
    _set_login_csrf(request, response, token)
    return response


def _set_login_csrf(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.app.state.settings.secure_cookies,
        path="/login",
        max_age=3600,
    )


@router.post("/logout")
def logout(request: Request, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_ONLY)
        auth.revoke_token(session, viewer.principal.token_id, by=viewer.principal)
    response = see_other("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return response
