"""What every route depends on: a database session and the authenticated caller."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from styrmin_backend.api.errors import ERROR_RESPONSES
from styrmin_backend.browser_session import (
    CSRF_HEADER,
    SESSION_COOKIE,
    csrf_token_for,
)
from styrmin_backend.domain.errors import NotAllowed, NotAuthenticated
from styrmin_backend.domain.roles import Role, role_refusal
from styrmin_backend.services import auth
from styrmin_backend.services.principal import Principal, check_actions_scope
from styrmin_backend.settings import Settings

API_PREFIX = "/api/v1"


def api_router(*, prefix: str = "", tags: list[str]) -> APIRouter:
    """The router of one part of the API: its routes are built once, under ``API_PREFIX``, with the
    API's error answers, and added to each app as they are (see ``styrmin_backend.api.app``)."""
    return APIRouter(prefix=API_PREFIX + prefix, tags=list(tags), responses=ERROR_RESPONSES)


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_db(request: Request) -> Iterator[Session]:
    """A session whose work is committed when the route succeeds and rolled back when it fails."""
    with request.app.state.session_factory() as session, session.begin():
        yield session


@contextmanager
def short_transaction(request: Request) -> Iterator[Session]:
    """A session of its own, committed at the end of the block: for a route that waits between looks
    at the database (a long poll) and so must hold no connection while it waits."""
    with app_transaction(request.app) as session:
        yield session


@contextmanager
def app_transaction(app: Any) -> Iterator[Session]:
    """A session of ``app``'s, committed at the end of the block: for work a request leaves to do
    after its answer (the app's FastAPI instance, typed loosely as Starlette hands it over)."""
    with app.state.session_factory() as session, session.begin():
        yield session


def get_settings_dep(request: Request) -> Settings:
    """The server's settings."""
    settings: Settings = request.app.state.settings
    return settings


# scope="function": the transaction commits before the answer is sent, so a failed commit is never
# reported as a success.
Db = Annotated[Session, Depends(get_db, scope="function")]
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


def bearer_token(request: Request) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, if any."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def authenticate_request(request: Request, db: Session) -> Principal:
    """The caller of ``request``, by Bearer token or session cookie (with CSRF check on writes)."""
    token = bearer_token(request)
    if token is not None:
        principal = auth.authenticate(db, token)
        _check_actions_scope(request, db, principal)
        return principal
    session_token = request.cookies.get(SESSION_COOKIE)
    if not session_token:
        raise NotAuthenticated("Sign in first: send an API token as 'Authorization: Bearer TOKEN'.")
    principal = auth.authenticate_session(db, session_token)
    if request.method not in _SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent, csrf_token_for(session_token)):
            raise NotAllowed(
                f"The request lacks a valid {CSRF_HEADER} header; reload the page and try again."
            )
    return principal


def _check_actions_scope(request: Request, db: Session, principal: Principal) -> None:
    """Keep an actions token to its own deployment and task, for every route that authenticates."""
    if not principal.is_actions_token:
        return
    route = request.scope.get("route")
    # The route's template below the API prefix, whether or not the route was copied with its prefix.
    route_path = str(getattr(route, "path", "")).removeprefix(API_PREFIX)
    check_actions_scope(
        db, principal, request.method, route_path, request.path_params, request.query_params, request.url.path
    )


def require(role: Role) -> Callable[[Request, Session], Principal]:
    """A dependency giving the caller, refusing anyone whose role is below ``role``."""

    def dependency(request: Request, db: Db) -> Principal:
        principal = authenticate_request(request, db)
        refusal = role_refusal(principal.username, principal.role, role)
        if refusal is not None:
            raise NotAllowed(refusal)
        return principal

    return dependency


Reader = Annotated[Principal, Depends(require(Role.READ_ONLY), scope="function")]
Writer = Annotated[Principal, Depends(require(Role.READ_WRITE), scope="function")]
Admin = Annotated[Principal, Depends(require(Role.ADMIN), scope="function")]
