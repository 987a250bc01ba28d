"""Kubernetes Status errors: every failure the API answers is one of these."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failure answered as a `Status` object with Kubernetes' reason and code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(kind: str | None, name: str | None, group: str = "") -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    return details


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', _details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        409, "AlreadyExists", f'{resource} "{name}" already exists', _details(plural, name, group)
    )


def conflict(plural: str, name: str, group: str = "") -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        _details(plural, name, group),
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> ApiError:
    """422 Invalid; `causes` are (field, message) pairs."""
    text = "; ".join(f"{field}: {message}" if field else message for field, message in causes)
    details = _details(kind, name, group)
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": message, "field": field} for field, message in causes
    ]
    resource = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{resource} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got "{content_type}")',
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def path_not_found(path: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        "the server could not find the requested resource",
        {"causes": [{"reason": "UnexpectedServerResponse", "message": f"404 page not found: {path}"}]},
    )
