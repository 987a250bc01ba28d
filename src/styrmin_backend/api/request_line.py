"""Requests whose path or query holds a NUL character are refused before any route runs."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from styrmin_backend.api.errors import error_response

API_PREFIX = "/api/"


def nul_in_request_line(path: str, query: str) -> tuple[str, str] | None:
    """(field, message) when the decoded ``path`` or a name or value of ``query`` holds NUL, else None.

    No database stores NUL in text (PostgreSQL refuses it), so such a name can name nothing; asked
    of the database, it was answered with a 500 on PostgreSQL (and "not found" on SQLite).
    """
    if "\x00" in path:
        return "path", "The path contains a NUL character (%00); remove it."
    for name, value in parse_qsl(query, keep_blank_values=True):
        if "\x00" in name:
            return "query", "A query parameter's name contains a NUL character (%00); remove it."
        if "\x00" in value:
            return name, f"The query parameter {name} contains a NUL character (%00); remove it."
    return None


class RefuseNulInRequestLine:
    """ASGI middleware: answers 422 to a request whose path or query holds NUL, naming where.

    The API answers with its JSON error; any other path (the web UI) with ``page(request, message)``.
    Body fields are checked by the API's request models (``schemas.Strict``) and the pages' forms.
    """

    def __init__(self, app: ASGIApp, page: Callable[[Request, str], Response]) -> None:
        self.app = app
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = scope.get("query_string", b"").decode("latin-1")
            refused = nul_in_request_line(scope["path"], query)
            if refused is not None:
                field, message = refused
                answer: Response
                if scope["path"].startswith(API_PREFIX):
                    answer = error_response(422, message, field)
                else:
                    answer = self.page(Request(scope, receive), message)
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)
