"""The API's OpenAPI document: stable operation ids, the bearer scheme, the agent-only routes marked.

Everything here is decided once for every route (no route declares it), so a new route gets the same.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

BEARER_SCHEME = "bearer"
"""The name of the security scheme in ``components.securitySchemes``."""

PUBLIC_OPERATIONS = frozenset({"login", "openSession"})
"""The operations a caller reaches without a token: signing in (with a password) makes one."""

AGENT_ONLY_TAG = "agent-only"
"""The tag of the routes only an agent's key (or, for a step's notes and output, its actions' token) may call."""

TAGS = [
    {"name": "auth", "description": "Signing in, API tokens, who am I."},
    {"name": "users", "description": "Users and their roles (Admin to change)."},
    {"name": "drivers", "description": "Driver versions: push, validate, list, download."},
    {"name": "deployments", "description": "Deployments and the changes that make tasks."},
    {"name": "backups", "description": "Backups, their schedules and each cluster's backup location."},
    {"name": "tasks", "description": "What each change did, step by step; retries."},
    {"name": "agents", "description": "Registering and revoking agents (Admin)."},
    {
        "name": AGENT_ONLY_TAG,
        "description": "Called by an agent with its key (sta_...), never by users: claims, steps, task ends.",
    },
]


def operation_id(route: APIRoute) -> str:
    """The route's function name in camelCase: ``list_deployments`` -> ``listDeployments``.

    Stable as long as the function keeps its name, which tests/api/test_openapi.py holds to.

    >>> from fastapi.routing import APIRoute
    >>> def list_deployments() -> None: ...
    >>> operation_id(APIRoute("/api/v1/deployments", list_deployments))
    'listDeployments'
    """
    first, *rest = route.name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def mark_routes(routes: list[Any]) -> None:
    """Give each API route its operation id, and the agent's routes the agent-only tag (their ids
    start with ``agent``: ``agentDownloadDriver`` beside the users' ``downloadDriver``).

    Raises:
        RuntimeError: two routes would share an id; rename one of their functions.
    """
    seen: dict[str, str] = {}
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        if route.operation_id is None:
            route.operation_id = operation_id(route)
            if route.path.startswith("/api/v1/agent/"):
                route.operation_id = "agent" + route.operation_id[0].upper() + route.operation_id[1:]
        if route.path.startswith("/api/v1/agent/"):
            route.tags = [AGENT_ONLY_TAG]
        where = f"{','.join(sorted(route.methods or ()))} {route.path}"
        if seen.setdefault(route.operation_id, where) != where:
            raise RuntimeError(
                f"{where} and {seen[route.operation_id]} would share the operation id "
                f"{route.operation_id}; rename one of their functions."
            )


def install_openapi(app: FastAPI) -> None:
    """Build ``app``'s document with the tags' descriptions and the bearer scheme on each operation."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        app.openapi_tags = TAGS
        document = build()
        components = document.setdefault("components", {})
        components.setdefault("securitySchemes", {})[BEARER_SCHEME] = {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "An API token (POST /api/v1/auth/login makes one; sty_...), or an agent's key "
                "(sta_...) for the agent-only routes."
            ),
        }
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                if operation.get("operationId") not in PUBLIC_OPERATIONS:
                    operation["security"] = [{BEARER_SCHEME: []}]
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
