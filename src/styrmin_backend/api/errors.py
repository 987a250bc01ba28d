"""How the API answers errors: JSON with a message and, for bad input, the field."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from styrmin_backend.domain.errors import (
    DomainError,
    TooManyAttempts,
)
from styrmin_backend.services.outages import database_outage_notice

log = logging.getLogger("styrmin.api")


class FieldError(BaseModel):
    """One field that is wrong, and why."""

    field: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer of the API."""

    message: str
    field: str | None = None
    errors: list[FieldError] = []


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        400: "The request could not be read (for example, a body that is not JSON).",
        401: "Not signed in, or the token is expired, revoked or of a deactivated user.",
        403: "The caller's role does not allow this, or the request is refused.",
        404: "Not found.",
        409: "Conflicts with the current state.",
        410: "For an agent: the task was cancelled; stop working on it.",
        422: "The input is not valid; `field` names what to fix.",
        429: "Too many failed logins, driver checks or presence connections at once: wait the seconds that "
        "`Retry-After` says.",
        503: "Styrmin's database cannot be reached; nothing was changed. Try again after `Retry-After` seconds.",
    }.items()
}


def error_response(
    status: int,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A JSON error answer."""
    body = ErrorBody(message=message, field=field, **extra).model_dump(mode="json")
    all_headers = dict(headers or {})
    if status == 401:
        all_headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=all_headers)


def _field_path(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "cookie", "[key]")]
    return ".".join(parts) or str(loc[0] if loc else "request")


_FASTAPI_UNREADABLE_BODY = "There was an error parsing the body"
"""FastAPI's detail for a body its JSON reading failed on with another error than a decode error."""


def install_error_handlers(app: FastAPI) -> None:
    """Answer domain errors, bad input and bugs as JSON errors, never as tracebacks."""

    @app.exception_handler(DomainError)
    async def _domain(_request: Request, error: DomainError) -> JSONResponse:
        if isinstance(error, TooManyAttempts):
            headers = {"Retry-After": str(error.retry_after)}
            return error_response(error.http_status, error.message, error.field, headers=headers)
        return error_response(error.http_status, error.message, error.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, error: RequestValidationError) -> JSONResponse:
        unreadable = next((e for e in error.errors() if e.get("type") == "json_invalid"), None)
        if unreadable is not None:  # the body as a whole: no field of it can be named
            position = next((p for p in unreadable.get("loc", ()) if isinstance(p, int)), None)
            reason = (unreadable.get("ctx") or {}).get("error", "it does not parse")
            at = f" at character {position}" if position is not None else ""
            return error_response(
                400, f"The body is not valid JSON ({reason}{at}); send a JSON document.", "body"
            )
        fields = [
            FieldError(
                field=_field_path(tuple(e.get("loc", ()))),
                message=str(e.get("msg", "invalid")).removeprefix("Value error, "),
            )
            for e in error.errors()
        ]
        first = fields[0] if fields else FieldError(field="request", message="invalid")
        message = f"{first.field}: {first.message}"
        if len(fields) > 1:
            message += f" (and {len(fields) - 1} more)"
        return error_response(422, message, first.field, errors=fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and error.detail == _FASTAPI_UNREADABLE_BODY:
            # A body json.loads refused with another error than a decode error (an endless number).
            reason = str(error.__cause__ or "it does not parse")[:200]
            return error_response(
                400, f"The body is not valid JSON ({reason}); send a JSON document.", "body"
            )
        headers = dict(error.headers or {})
        if error.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(app, request.url.path))
        return error_response(error.status_code, str(error.detail), headers=headers)

    # Database errors are answered here, not by the catch-all below: Starlette re-raises what that
    # one answers, so uvicorn would log an outage as a traceback.
    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, error: SQLAlchemyError) -> JSONResponse:
        notice = database_outage_notice(request.app.state.engine, error)
        if notice is None:
            return _unexpected(request, error)
        if notice.outage_began:
            log.warning("%s %s: %s", request.method, request.url.path, notice.message)
        return error_response(503, notice.message, headers={"Retry-After": str(notice.retry_after)})

    @app.exception_handler(Exception)
    async def _bug(request: Request, error: Exception) -> JSONResponse:
        return _unexpected(request, error)


def _unexpected(request: Request, error: Exception) -> JSONResponse:
    """A bug's answer: 500 with a request id, under which the log has the traceback."""
    request_id = uuid.uuid4().hex[:12]
    log.error(
        "Unexpected error on %s %s (request %s)", request.method, request.url.path, request_id, exc_info=error
    )
    return error_response(
        500, f"Styrmin hit an unexpected error; the server log has details under request id {request_id}."
    )


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route of ``path`` answers (Starlette names only the first route's)."""
    methods: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        pattern = "^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            methods |= {m.upper() for m in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)
