"""What the sync and async clients share: settings, the calls of the API, answers and retries."""

from __future__ import annotations

import logging
import os
import random
import re
import time
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
DEFAULT_RETRIES: int | None = None
"""No bound on the number of tries: ``retry_seconds`` bounds them."""
RETRY_SECONDS_ENV = "STYRMIN_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 90.0
"""How long an idempotent call waits for Styrmin by default: a database or server restart fits in it."""
RETRY_STATUSES = frozenset({502, 503, 504})
"""Statuses an idempotent call is retried on: the server (or a proxy before it, or its database) is away."""
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD"})
_MAX_DELAY_SECONDS = 5.0

log = logging.getLogger("styrmin")

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
    idempotent: bool = False
    """A write that may be sent twice with the effect of once (the seed's ``stop_components``, ...)."""

    @property
    def retryable(self) -> bool:
        """Reads and idempotent writes are retried; another write might have been carried out already."""
        return self.idempotent or self.method in IDEMPOTENT_METHODS


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
    """Seconds to wait before retry number ``attempt`` (1, 2, ...): Retry-After, else a backoff
    doubling from 0.25 s up to 5 s, with jitter so that many clients do not come back at once."""
    if response is not None:
        after = response.headers.get("retry-after", "")
        if after.isdigit():  # what the server asks, and a little more (jitter) so clients spread out
            wait = min(float(after), _MAX_DELAY_SECONDS)
            return float(min(_MAX_DELAY_SECONDS, wait + random.uniform(0, wait / 4)))  # noqa: S311
    ceiling = min(0.25 * 2 ** (attempt - 1), _MAX_DELAY_SECONDS)
    return float(ceiling / 2 + random.uniform(0, ceiling / 2))  # noqa: S311 (not for secrets)


def resolve_retry_seconds(seconds: float | None) -> float:
    """How long idempotent calls wait for Styrmin: ``seconds``, else ``STYRMIN_RETRY_SECONDS``, else 90."""
    if seconds is not None:
        return max(0.0, seconds)
    text = os.environ.get(RETRY_SECONDS_ENV, "").strip()
    if not text:
        return DEFAULT_RETRY_SECONDS
    try:
        return max(0.0, float(text))
    except ValueError:
        raise ConfigurationError(
            f'{RETRY_SECONDS_ENV}="{text}" is not a number of seconds; set it to, say, 60 (0: no retries).'
        ) from None


def _clock(moment: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(moment))


class Retrying:
    """The retries of one call (I/O-free: both clients sleep the delays it gives).

    An idempotent call is tried again on a connection error or 502/503/504 until ``seconds`` have
    passed (and at most ``retries`` times when that is set); the first wait is logged, once.
    """

    def __init__(self, call: Call[Any], base_url: str, seconds: float, retries: int | None) -> None:
        self._call = call
        self._base_url = base_url
        self._deadline = time.monotonic() + seconds
        self._began = time.time()
        self._seconds = seconds
        self._retries = retries
        self.attempt = 0
        self.waited = False

    def delay_after(
        self, error: httpx.TransportError | None, response: httpx.Response | None
    ) -> float | None:
        """Seconds to wait before trying again after ``error`` or ``response``; None: do not retry."""
        if response is not None and response.status_code not in RETRY_STATUSES:
            return None
        if not self._call.retryable or self._seconds <= 0:
            return None
        if self._retries is not None and self.attempt > self._retries:
            return None
        delay = retry_delay(self.attempt, response)
        if time.monotonic() + delay > self._deadline:
            return None
        if not self.waited:
            self.waited = True
            why = (
                connection_error(self._base_url, error).message
                if error is not None
                else f"it answered {response.status_code if response is not None else '?'}"
                + (f": {error_of(response).message}" if response is not None else "")
            )
            log.warning(
                "Waiting up to %.0f s for Styrmin at %s to serve %s %s (%s).",
                self._seconds,
                self._base_url,
                self._call.method,
                API_PREFIX + self._call.path,
                why,
            )
        return delay

    def gave_up(self, error: StyrminError) -> StyrminError:
        """``error`` saying how long the call waited, when it did."""
        if self.waited:
            error.message = (
                f"{error.message} (tried again from {_clock(self._began)} to {_clock(time.time())}, "
                f"{time.time() - self._began:.0f} s; {RETRY_SECONDS_ENV} sets how long)"
            )
            error.args = (error.message,)
        return error


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
