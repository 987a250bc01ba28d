"""The OpenAPI document: a bearer scheme (the Authorize button of /api/docs), stable operation ids,
and the routes only agents call marked as theirs."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Stack


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def test_every_operation_but_signing_in_asks_for_the_bearer_token(stack: Stack) -> None:
    document = stack.client.get("/api/openapi.json").json()
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearer"]["description"],
    }
    open_to_all = sorted(f"{m} {p}" for m, p, op in _operations(document) if "security" not in op)
    assert open_to_all == ["POST /api/v1/auth/login", "POST /api/v1/auth/session"]
    assert all(op["security"] == [{"bearer": []}] for _, _, op in _operations(document) if "security" in op)


def test_operation_ids_are_the_route_names_in_camel_case(stack: Stack) -> None:
    document = stack.client.get("/api/openapi.json").json()
    ids = {f"{m} {p}": op["operationId"] for m, p, op in _operations(document)}
    assert len(set(ids.values())) == len(ids), "operation ids must be unique"
    assert ids["GET /api/v1/deployments"] == "listDeployments"
    assert ids["POST /api/v1/deployments"] == "createDeployment"
    assert ids["GET /api/v1/tasks/{task_id}"] == "getTask"
    assert ids["POST /api/v1/auth/login"] == "login"
    assert all(op_id[0].islower() and "_" not in op_id for op_id in ids.values())


def test_the_agents_routes_are_tagged_agent_only_and_described(stack: Stack) -> None:
    document = stack.client.get("/api/openapi.json").json()
    for _, path, operation in _operations(document):
        agent_only = path.startswith("/api/v1/agent/")
        assert ("agent-only" in operation["tags"]) == agent_only, path
    tags = {tag["name"]: tag["description"] for tag in document["tags"]}
    assert "agent" in tags["agent-only"] and "never by users" in tags["agent-only"]


def test_the_document_is_built_once_per_app(stack: Stack) -> None:
    first = stack.client.get("/api/openapi.json").json()
    assert stack.client.get("/api/openapi.json").json() == first
