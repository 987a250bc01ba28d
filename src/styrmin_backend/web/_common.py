"""What every page shares: the signed-in user, CSRF checks, database units, and rendering."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from styrmin_backend.browser_session import SESSION_COOKIE, csrf_token_for
from styrmin_backend.domain.errors import (
    DomainError,
    NotAuthenticated,
)
from styrmin_backend.domain.hooks import HOOK_STEP_NAMES
from styrmin_backend.domain.roles import Role, role_allows
from styrmin_backend.services import auth
from styrmin_backend.services.outages import database_outage_notice
from styrmin_backend.services.principal import Principal
from styrmin_backend.web import _format

CSRF_FIELD = "csrf_token"
"""The hidden field every form of the UI sends, checked against the session's CSRF token."""

CONFIRMED_FIELD = "confirmed"
"""The hidden field a confirmation page's button posts, as "yes", with the form it asked about."""

EDIT_FIELD = "edit"
"""The field a confirmation page's second button posts, as "yes", to show its form again to change."""

LOGIN_CSRF_COOKIE = "styrmin_login_csrf"
"""Before a session exists, the login form's CSRF token is a random value doubled in this cookie."""


_HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(_HERE / "templates"))
templates.env.filters.update(
    when=_format.when,
    duration=_format.duration,
    status_icon=_format.status_icon,
    status_label=_format.status_label,
    yaml=_format.as_yaml,
)
templates.env.globals.update(
    CSRF_FIELD=CSRF_FIELD,
    CONFIRMED_FIELD=CONFIRMED_FIELD,
    EDIT_FIELD=EDIT_FIELD,
    HOOK_STEP_NAMES=HOOK_STEP_NAMES,
)

# Inline styles are allowed for the timeline bars' widths (and htmx's indicator style); scripts are not.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@dataclass(frozen=True)
class Viewer:
    """The signed-in user of a page and the CSRF token its forms carry."""

    principal: Principal
    csrf_token: str

    @property
    def can_write(self) -> bool:
        """Whether the user may operate deployments (Read/write or Admin)."""
        return role_allows(self.principal.role, Role.READ_WRITE)

    @property
    def is_admin(self) -> bool:
        """Whether the user may manage users."""
        return self.principal.role is Role.ADMIN


class WebForbidden(Exception):
    """A form post the server refuses: no valid CSRF token, or a role that does not allow it."""

    def __init__(self, message: str, viewer: Viewer | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.viewer = viewer
        """The signed-in user, so that the refusal page keeps the navigation."""


@contextmanager
def unit(request: Request) -> Iterator[Session]:
    """A database session committed when the block succeeds, before the response is sent.

    A handler may roll back part way (after a refused change) and go on reading in the same unit.
    """
    with request.app.state.session_factory() as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        session.commit()


@contextmanager
def dry_run(request: Request) -> Iterator[Session]:
    """A database session that is always rolled back: to check a change before it is confirmed."""
    with request.app.state.session_factory() as session:
        try:
            yield session
        finally:
            session.rollback()


def viewer_of(request: Request, session: Session) -> Viewer:
    """The signed-in user of ``request``; raises NotAuthenticated (the page then asks to log in)."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise NotAuthenticated("Log in to continue.")
    return Viewer(auth.authenticate_session(session, token), csrf_token_for(token))


def check_form(request: Request, form: FormData, viewer: Viewer, needed: Role) -> None:
    """Refuse a form post without the session's CSRF token, or from a role below ``needed``."""
    sent = form.get(CSRF_FIELD)
    if not isinstance(sent, str) or not hmac.compare_digest(sent, viewer.csrf_token):
        raise WebForbidden(
            "The form has expired or did not come from this page; reload the page and try again.", viewer
        )
    check_role(viewer, needed)


def check_role(viewer: Viewer, needed: Role) -> None:
    """Refuse a page or form to a role below ``needed``, saying which role it needs."""
    if not role_allows(viewer.principal.role, needed):
        raise WebForbidden(
            f'You are signed in as "{viewer.principal.username}" with the role '
            f"{viewer.principal.role.label}; this needs {needed.label}. Ask an administrator to change "
            "your role.",
            viewer,
        )


async def read_form(request: Request) -> FormData:
    """The posted form (a dependency, so that handlers can stay synchronous)."""
    return await request.form()


Form = Annotated[FormData, Depends(read_form)]
"""A form endpoint's parameter: the posted form."""


def text(form: FormData, name: str) -> str:
    """A text field of ``form``, empty when absent, without NUL characters (no typing makes them)."""
    value = form.get(name)
    return value.replace("\x00", "") if isinstance(value, str) else ""


def wants_to_edit(form: FormData) -> bool:
    """Whether ``form`` came back from its confirmation page to be changed (see :func:`confirm_page`)."""
    return text(form, EDIT_FIELD) == "yes"


def is_confirmed(form: FormData) -> bool:
    """Whether ``form`` was posted from its confirmation page (see :func:`confirm_page`)."""
    return text(form, CONFIRMED_FIELD) == "yes"


def new_login_csrf() -> str:
    """A random token for the login form, doubled in a cookie."""
    return secrets.token_urlsafe(24)


def prefect_ui_url(request: Request) -> str:
    """The Prefect UI's base URL (the ``prefect_ui_url`` setting)."""
    url: str = request.app.state.settings.prefect_ui_url
    return url.rstrip("/")


def render(
    request: Request,
    template: str,
    viewer: Viewer | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """A page rendered from ``template`` with the viewer and the current time in its context."""
    response = templates.TemplateResponse(
        request,
        template,
        {"viewer": viewer, "now": _format.now(), **context},
        status_code=status_code,
    )
    response.headers.update(_SECURITY_HEADERS)
    return response


def confirm_page(
    request: Request,
    viewer: Viewer,
    *,
    title: str,
    lines: list[str],
    action: str,
    button: str,
    cancel: str,
    hidden: dict[str, Any] | None = None,
    danger: bool = False,
    section: str = "deployments",
    back: str = "Cancel",
    preview: Any = None,
    edit: str | None = None,
) -> HTMLResponse:
    """The page asking to confirm a change: what it will do (with its ``preview``, a
    ``services.preview.Preview``, when there is one), a button that posts ``hidden`` again, and a
    link (``back``) to ``cancel`` that changes nothing. ``edit``: the label of a second button that
    posts ``hidden`` back with :data:`EDIT_FIELD`, for the form to show them again to change."""
    return render(
        request,
        "confirm.html",
        viewer,
        title=title,
        lines=lines,
        action=action,
        hidden=hidden or {},
        button=button,
        cancel=cancel,
        back=back,
        danger=danger,
        section=section,
        preview=preview,
        edit=edit,
    )


HTMX_STOP_POLLING = 286
"""The status with which a polled part tells htmx to swap it one last time and stop polling."""


@dataclass(frozen=True)
class PolledPart:
    """A part of a page that the page polls for changes: its HTML and where and how often to ask."""

    element_id: str
    url: str
    body: Markup
    seconds: int = 3

    @property
    def stamp(self) -> str:
        """Changes when, and only when, what the part shows changes."""
        return hashlib.sha256(self.body.encode()).hexdigest()[:16]


def polled_part(element_id: str, url: str, template: str, seconds: int = 3, **context: Any) -> PolledPart:
    """Render ``template`` as a part polled at ``url`` every ``seconds`` (include it with ``_polled.html``)."""
    body = Markup(templates.get_template(template).render(now=_format.now(), **context))  # noqa: S704 (autoescaped)
    return PolledPart(element_id, url, body, seconds)


def polled_answer(request: Request, viewer: Viewer, part: PolledPart, seen: str, **extra: Any) -> Response:
    """What a poll gets: 204 (htmx swaps nothing) while ``part`` shows what the page has, else the part.

    ``extra`` goes to ``_polled.html`` (``oob``: more HTML swapped out of band, such as a heading's status).
    """
    if part.stamp == seen:
        return Response(status_code=204)
    return render(request, "_polled.html", viewer, part=part, **extra)


def see_other(url: str) -> RedirectResponse:
    """The redirect after a successful form post (POST, then GET)."""
    return RedirectResponse(url, status_code=303)


def safe_next(url: str) -> str:
    """``url`` when it is a path of this site, else the home page (no open redirects)."""
    if url.startswith("/") and not url.startswith("//") and "\\" not in url:
        return url
    return "/"


def status_of(error: DomainError) -> int:
    """The HTTP status a page answers ``error`` with (as the API does)."""
    return error.http_status


def _login_redirect(request: Request) -> Response:
    target = "/login?next=" + _format.quote(request.url.path)
    if request.headers.get("HX-Request"):
        return Response(status_code=204, headers={"HX-Redirect": target})
    return see_other(target)


class WebRoute(APIRoute):
    """A route of the UI: expected failures are answered with a readable page, never JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except NotAuthenticated:
                return _login_redirect(request)
            except WebForbidden as error:
                return render(
                    request, "error.html", error.viewer, 403, title="Not allowed", message=error.message
                )
            except DomainError as error:
                status = status_of(error)
                title = "Not found" if status == 404 else "The request was refused"
                return render(request, "error.html", None, status, title=title, message=error.message)
            except SQLAlchemyError as error:
                notice = database_outage_notice(request.app.state.engine, error)
                if notice is None:
                    raise  # a bug: the app's handler answers 500 with a request id
                page = render(
                    request, "error.html", None, 503, title="Styrmin cannot serve now", message=notice.message
                )
                page.headers["Retry-After"] = str(notice.retry_after)
                return page

        return handle


def age(moment: datetime | None) -> str:
    """How long ago ``moment`` was, for lists."""
    return _format.age(moment)
