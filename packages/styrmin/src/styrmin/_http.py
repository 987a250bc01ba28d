"""What the sync and async clients share: settings, the calls of the API, answers and retries."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Generic, TypeVar

import httpx
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from styrmin._environment import TOKEN_ENV as TOKEN_ENV
from styrmin._environment import URL_ENV as URL_ENV
from styrmin.errors import (
    ConfigurationError,
    FieldError,
    StyrminConnectionError,
    StyrminError,
    error_for_status,
)

T = TypeVar("T")

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
RETRY_STATUSES = frozenset({502, 503, 504})
"""Statuses a read is retried on: the server (or a proxy before it) is briefly unavailable."""
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD"})

try:
    _VERSION = version("styrmin")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
    _VERSION = "0"
USER_AGENT = f"styrmin-python/{_VERSION}"


def resolve_url(url: str | None) -> str:
    """The server's base URL: ``url``, else ``STYRMIN_URL``; without a trailing ``/`` or ``/api/v1``."""
    chosen = url or os.environ.get(URL_ENV, "")
    chosen = chosen.strip().rstrip("/")
    if not chosen:
        raise ConfigurationError(
            f"No Styrmin URL: pass url=... or set {URL_ENV} (for example http://127.0.0.1:8080)."
        )
    if not chosen.startswith(("http://", "https://")):
        raise ConfigurationError(f'"{chosen}" is not an http:// or https:// URL; give the server\'s URL.')
    return chosen.removesuffix(API_PREFIX)


def resolve_token(token: str | None) -> str | None:
    """The API token: ``token``, else ``STYRMIN_TOKEN``, else none (only logging in works then)."""
    chosen = token if token is not None else os.environ.get(TOKEN_ENV)
    return chosen.strip() if chosen and chosen.strip() else None


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to the API and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    pages: bool = False
    """A list the API answers page by page: the client follows each ``Link: <...>; rel="next"``."""

    @property
    def retryable(self) -> bool:
        """Only idempotent reads are retried: a write might have been carried out already."""
        return self.method in IDEMPOTENT_METHODS


_NEXT_LINK = re.compile(r'<([^>]+)>;\s*rel="next"')


def next_page(call: Call[T], response: httpx.Response) -> Call[T] | None:
    """The call for the page after ``response`` of a paged list, None on the last page."""
    if not call.pages:
        return None
    found = _NEXT_LINK.search(response.headers.get("link", ""))
    if found is None:
        return None
    path = found.group(1)
    return replace(
        call, path=path.removeprefix(API_PREFIX) if path.startswith(API_PREFIX) else path, params=None
    )


def model(adapter_type: Any) -> Callable[[httpx.Response], Any]:
    """A parser of an answer's JSON into ``adapter_type`` (a model or a ``list[Model]``)."""
    adapter: TypeAdapter[Any] = TypeAdapter(adapter_type)

    def parse(response: httpx.Response) -> Any:
        return adapter.validate_json(response.content)

    return parse


def no_content(_response: httpx.Response) -> None:
    return None


def raw_content(response: httpx.Response) -> bytes:
    return response.content


def error_of(response: httpx.Response) -> StyrminError:
    """The typed exception for an error answer, with the server's message, field and errors."""
    message, field_name, errors = "", None, []
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = str(body.get("message") or body.get("detail") or "")
        field_name = body.get("field") if isinstance(body.get("field"), str) else None
        for entry in body.get("errors") or []:
            if isinstance(entry, dict):
                errors.append(FieldError(str(entry.get("field") or ""), str(entry.get("message") or "")))
    if not message:
        text = response.text.strip()
        reason = response.reason_phrase or "error"
        message = f"The server answered {response.status_code} {reason}" + (
            f": {text[:500]}" if text else "."
        )
    return error_for_status(response.status_code, message, field_name, errors)


def connection_error(base_url: str, error: httpx.HTTPError) -> StyrminConnectionError:
    """The exception for a request that got no answer."""
    if isinstance(error, httpx.TimeoutException):
        what = "did not answer in time"
    elif isinstance(error, httpx.ConnectError):
        what = "cannot be reached"
    else:
        what = "failed to answer"
    detail = str(error) or type(error).__name__
    return StyrminConnectionError(f"Styrmin at {base_url} {what} ({detail}); check the URL and the server.")


def retry_delay(attempt: int, response: httpx.Response | None) -> float:
    """Seconds to wait before retry number ``attempt`` (1, 2, ...): Retry-After, else backoff."""
    if response is not None:
        after = response.headers.get("retry-after", "")
        if after.isdigit():
            return min(float(after), 10.0)
    return float(min(0.25 * 2 ** (attempt - 1), 2.0))


def build_headers(token: str | None, extra: Mapping[str, str]) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    headers.update(extra)
    return headers


def read(call: Call[T], response: httpx.Response, base_url: str) -> T:
    """The answer to ``call``, or the typed exception for an error answer.

    An answer that is not what the API sends (a proxy's HTML page, another service) raises
    :class:`StyrminError` naming the URL rather than a parsing error.
    """
    if response.status_code >= 400:
        raise error_of(response)
    try:
        return call.parse(response)
    except (ValueError, PydanticValidationError) as error:
        raise StyrminError(
            f"The answer of {base_url} to {call.method} {API_PREFIX}{call.path} is not what Styrmin "
            f"answers ({type(error).__name__}); check that the URL is Styrmin's.",
            status=response.status_code,
        ) from error
