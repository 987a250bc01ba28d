"""The exceptions of the SDK: every error the server answers becomes one, with its message and status.

The hierarchy::

    StyrminError                      anything that went wrong (``status`` is None when no server answered)
    ├── ConfigurationError            no URL given and STYRMIN_URL not set, or a bad argument
    ├── InvalidDriverError            a driver folder cannot be packed, or the path does not exist
    ├── StyrminConnectionError        the server could not be reached, or did not answer in time
    ├── WaitTimeoutError              a task did not end within the wait's timeout
    ├── TaskFailedError               a waited-for task failed (only with ``raise_on_failure=True``)
    └── APIError                      the server answered with an error (``status`` is its HTTP status)
        ├── BadRequestError           400: the request could not be read
        ├── AuthenticationError       401: not signed in, or the token is expired, revoked or deactivated
        ├── ForbiddenError            403: the role does not allow it, or the request is refused
        ├── NotFoundError             404
        ├── ConflictError             409: conflicts with the current state
        ├── PayloadTooLargeError      413: the driver archive is too large
        ├── ValidationError           422: invalid input; ``field`` and ``errors`` say what to fix
        └── ServerError               5xx
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One input that is wrong, and why (an entry of the server's ``errors`` list)."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class StyrminError(Exception):
    """Something went wrong talking to Styrmin.

    Attributes:
        message: what failed and what to do, as the server said it when it answered.
        status: the HTTP status of the server's answer; None when no server answered.
        field: the input to fix, when the server named one.
        errors: every input that is wrong (for example every problem of an invalid driver).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        field: str | None = None,
        errors: list[FieldError] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field
        self.errors: list[FieldError] = list(errors or [])

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})" if self.status is not None else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r}, field={self.field!r})"


class ConfigurationError(StyrminError):
    """The client cannot be used as configured (for example: no URL and no ``STYRMIN_URL``)."""


class StyrminConnectionError(StyrminError):
    """The server could not be reached or did not answer in time (after the retries reads get)."""


class WaitTimeoutError(StyrminError):
    """A task did not end within the time given to ``tasks.wait``; ``task`` is its last state."""

    def __init__(self, message: str, *, task: Any = None) -> None:
        super().__init__(message)
        self.task = task


class APIError(StyrminError):
    """The server answered with an error; ``status`` is the HTTP status."""

    status: int


class BadRequestError(APIError):
    """400: the request could not be read."""


class AuthenticationError(APIError):
    """401: not signed in, or the token is expired, revoked or of a deactivated user."""


class ForbiddenError(APIError):
    """403: the caller's role does not allow it, or the request is refused."""


class NotFoundError(APIError):
    """404: the driver, deployment, task or user does not exist."""


class ConflictError(APIError):
    """409: conflicts with the current state (a name already taken, a deployment being deleted, ...)."""


class PayloadTooLargeError(APIError):
    """413: the request body is too large (a driver archive past the server's limit)."""


class ValidationError(APIError):
    """422: the input is not valid; ``field`` names the first input to fix and ``errors`` lists all."""


class ServerError(APIError):
    """5xx: the server failed; its log has the details."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
}


def error_for_status(
    status: int, message: str, field: str | None = None, errors: list[FieldError] | None = None
) -> APIError:
    """The exception for an error answer with HTTP ``status``."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(message, status=status, field=field, errors=errors)


class InvalidDriverError(StyrminError):
    """A driver cannot be sent: its folder cannot be packed, or the path does not exist."""


class TaskFailedError(StyrminError):
    """A task that ``tasks.wait(..., raise_on_failure=True)`` waited for failed; ``task`` is it."""

    def __init__(self, message: str, *, task: Any = None) -> None:
        super().__init__(message)
        self.task = task
