"""A browser's session over HTTP: its cookies and CSRF token, shared by the API's login and the web pages."""

from __future__ import annotations

import hashlib

from starlette.requests import Request
from starlette.responses import Response

from styrmin_backend.settings import Settings

SESSION_COOKIE = "styrmin_session"
CSRF_COOKIE = "styrmin_csrf"
CSRF_HEADER = "X-CSRF-Token"


def csrf_token_for(session_token: str) -> str:
    """The CSRF token bound to a session: only the holder of the session can know it."""
    return hashlib.sha256(b"styrmin-csrf:" + session_token.encode()).hexdigest()[:43]


def client_address(request: Request) -> str:
    """The client's address, as the server sees it (behind a proxy: as ``--forwarded-allow-ips`` lets
    uvicorn read it from ``X-Forwarded-For``)."""
    return request.client.host if request.client else "unknown"


def set_session_cookies(response: Response, session_token: str, settings: Settings) -> None:
    """Set the HttpOnly session cookie and the CSRF cookie that pages echo back."""
    max_age = int(settings.session_lifetime.total_seconds())
    response.set_cookie(
        SESSION_COOKIE,
        session_token,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
        path="/",
    )
    response.set_cookie(
        CSRF_COOKIE,
        csrf_token_for(session_token),
        max_age=max_age,
        httponly=False,
        samesite="strict",
        secure=settings.secure_cookies,
        path="/",
    )
