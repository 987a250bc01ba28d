"""Errors of the domain: each says what failed, why and what to do, and names its field."""

from __future__ import annotations

from typing import ClassVar


class DomainError(Exception):
    """A request the product's rules do not allow."""

    http_status: ClassVar[int] = 400
    """The HTTP status the API and the web pages answer it with: one table, here."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(DomainError):
    """The request's input is not valid."""

    http_status: ClassVar[int] = 422


class NotFound(DomainError):
    """The thing the request names does not exist."""

    http_status: ClassVar[int] = 404


class Conflict(DomainError):
    """The request conflicts with the current state (e.g. a name already taken)."""

    http_status: ClassVar[int] = 409


class TaskCancelled(DomainError):
    """The task an agent works on was cancelled: the agent stops its work and leaves the cluster as it is.

    Its own status (410 Gone), so that an agent tells it from the 409 of a task it no longer holds.
    """

    http_status: ClassVar[int] = 410


class Refused(DomainError):
    """The request is understood but the product refuses it (e.g. a built-in user's password)."""

    http_status: ClassVar[int] = 403


class InvalidTransition(DomainError):
    """A task or step was asked to move to a status it cannot reach from where it is."""

    http_status: ClassVar[int] = 409


class NotAuthenticated(DomainError):
    """The credentials are missing, wrong, expired or revoked, or the user is deactivated."""

    http_status: ClassVar[int] = 401


class NotAllowed(DomainError):
    """The caller is signed in but their role does not allow the request."""

    http_status: ClassVar[int] = 403


class TooManyAttempts(DomainError):
    """Too many failed logins in a row: the caller must wait ``retry_after`` seconds."""

    http_status: ClassVar[int] = 429

    def __init__(self, message: str, *, retry_after: int, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after = retry_after


class SecretKeyWrong(DomainError):
    """A secret value stored encrypted cannot be read with the keys in STYRMIN_SECRET_KEY."""

    http_status: ClassVar[int] = 503
