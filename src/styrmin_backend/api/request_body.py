"""Request bodies larger than the server ever needs are refused before they are read whole."""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from styrmin_backend.api.errors import error_response
from styrmin_backend.api.request_line import API_PREFIX
from styrmin_backend.domain.limits import DRIVER_ARCHIVE_MAX_BYTES, REQUEST_BODY_MAX_BYTES

DRIVER_UPLOADS = frozenset({"/api/v1/drivers", "/api/v1/drivers/validate", "/drivers"})
"""The paths that take a driver's archive (the web form's in a multipart body)."""
_MULTIPART_MARGIN = 64 * 1024
"""What a form adds around an archive: its boundaries, its CSRF field and the file's name."""


def body_limit(method: str, path: str) -> int:
    """The most bytes a request's body may hold: a driver's archive where one is pushed, else
    ``REQUEST_BODY_MAX_BYTES`` (the route refuses an archive past its own limit, naming it)."""
    if method == "POST" and path in DRIVER_UPLOADS:
        return DRIVER_ARCHIVE_MAX_BYTES + _MULTIPART_MARGIN
    return REQUEST_BODY_MAX_BYTES


def too_large_message(limit: int) -> str:
    return (
        f"The request's body is larger than {limit // (1024 * 1024)} MiB, the most Styrmin takes; "
        "send less (a configuration's values are far smaller)."
    )


class BodyTooLarge(HTTPException):
    """Raised from the body's reading once it outgrows its limit: the app answers 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_message(limit))


class LimitRequestBody:
    """ASGI middleware: answers 413 to a request whose declared length is past its limit, at once,
    and stops reading a body sent without a length (chunked) once it outgrows it.

    The API answers with its JSON error (field ``body``); other paths (the web UI) with
    ``page(request, message, status)``.
    """

    def __init__(self, app: ASGIApp, page: Callable[[Request, str, int], Response]) -> None:
        self.app = app
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            answer: Response
            if scope["path"].startswith(API_PREFIX):
                answer = error_response(
                    413, too_large_message(limit), "body", headers={"Connection": "close"}
                )
            else:
                answer = self.page(Request(scope), too_large_message(limit), 413)
                answer.headers["Connection"] = "close"
            await answer(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses it before it reaches the app
    return None
