"""Logging in and out, sessions, API tokens, and who am I."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Path, Request, Response

from styrmin_backend.api.deps import AppSettings, Db, Reader, api_router, bearer_token, require
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.schemas import (
    MAX_ID,
    IssuedTokenOut,
    LoginRequest,
    SessionOut,
    TokenCreateRequest,
    TokenOut,
    WhoAmI,
)
from styrmin_backend.browser_session import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    client_address,
    csrf_token_for,
    set_session_cookies,
)
from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import auth, users
from styrmin_backend.services.principal import Principal
from styrmin_backend.settings import Settings

router = api_router(tags=["auth"])


def _lifetime(settings: Settings, seconds: int | None) -> timedelta:
    if seconds is None:
        return settings.api_token_lifetime
    lifetime = timedelta(seconds=seconds)
    if lifetime > settings.api_token_max_lifetime:
        days = settings.api_token_max_lifetime.days
        raise InvalidInput(f"A token may live at most {days} days; ask for less.", field="expires_in_seconds")
    return lifetime


@router.post("/auth/login", response_model=IssuedTokenOut, status_code=201)
def login(body: LoginRequest, request: Request, db: Db, settings: AppSettings) -> IssuedTokenOut:
    """Log in with a password and get an API token for `Authorization: Bearer`.

    Repeated failures are refused for a while with 429 and `Retry-After` (see docs/api.md).
    """
    lifetime = _lifetime(settings, body.expires_in_seconds)
    user = auth.login(db, body.username, body.password, client_address(request))
    issued = auth.issue_token(db, user, auth.TokenKind.API, lifetime, name=body.token_name)
    return IssuedTokenOut(id=issued.id, token=issued.token, expires_at=issued.expires_at)


@router.post("/auth/session", response_model=SessionOut, status_code=201)
def open_session(
    body: LoginRequest, request: Request, db: Db, settings: AppSettings, response: Response
) -> SessionOut:
    """Log in with a password and get a session cookie (for the web UI) and its CSRF token."""
    user = auth.login(db, body.username, body.password, client_address(request))
    issued = auth.issue_token(db, user, auth.TokenKind.SESSION, settings.session_lifetime, name="web session")
    set_session_cookies(response, issued.token, settings)
    return SessionOut(
        username=user.username,
        role=Role(user.role),
        expires_at=issued.expires_at,
        csrf_token=csrf_token_for(issued.token),
    )


@router.post("/auth/logout", status_code=204)
def logout(request: Request, db: Db, principal: Reader, response: Response) -> None:
    """Revoke the token or session this request uses."""
    auth.revoke_token(db, principal.token_id, by=principal)
    if bearer_token(request) is None:
        response.delete_cookie(SESSION_COOKIE, path="/")
        response.delete_cookie(CSRF_COOKIE, path="/")


@router.get("/auth/tokens", response_model=list[TokenOut])
def list_tokens(
    db: Db, principal: Reader, request: Request, response: Response, limit: Limit = 500, cursor: Cursor = None
) -> list[TokenOut]:
    """Your tokens that are neither revoked nor expired, newest first."""
    found = [TokenOut.model_validate(token) for token in auth.live_tokens(db, principal.user_id)]
    return page_of(found, lambda t: str(t.id), limit=limit, cursor=cursor, request=request, response=response)


# Read-only users may make tokens for themselves: a token never gives more than its user's role.
@router.post("/auth/tokens", response_model=IssuedTokenOut, status_code=201)
def create_token(
    body: TokenCreateRequest,
    db: Db,
    settings: AppSettings,
    principal: Annotated[Principal, Depends(require(Role.READ_ONLY), scope="function")],
) -> IssuedTokenOut:
    """Make a named API token for yourself."""
    if principal.is_builtin:
        raise InvalidInput(
            f"{principal.username} cannot make tokens; Styrmin gives each reconciliation its own.",
            field="name",
        )
    user = users.get_user(db, principal.username)
    issued = auth.issue_token(
        db, user, auth.TokenKind.API, _lifetime(settings, body.expires_in_seconds), body.name
    )
    return IssuedTokenOut(id=issued.id, token=issued.token, expires_at=issued.expires_at)


@router.delete("/auth/tokens/{token_id}", status_code=204)
def revoke_token(token_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, principal: Reader) -> None:
    """Revoke one of your tokens (an admin may revoke anyone's)."""
    auth.revoke_token(db, token_id, by=principal)


@router.get("/whoami", response_model=WhoAmI)
def whoami(principal: Reader) -> WhoAmI:
    """The user this request is authenticated as."""
    return WhoAmI(
        username=principal.username,
        role=principal.role,
        builtin=principal.is_builtin,
        token_kind=principal.token_kind,
    )
