"""Property-based fuzzing of the whole API from its OpenAPI document: no 5xx, answers match the schema.

Schemathesis tests each operation in three phases: the examples of the OpenAPI document, fuzzing
(``max_examples`` generated requests, valid and invalid) and coverage (its deterministic boundary
cases: each field at the edges of its range, missing, of the wrong type; about 20 requests an
operation, half of the time). The fast loop runs the first two on both engines; coverage runs in the
slow set (``./scripts/test``), on the same app and database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance
from schemathesis.specs.openapi.schemas import OpenApiSchema

from styrmin_backend.api.routes.tasks import MAX_WAIT_UNTIL_END_SECONDS
from styrmin_backend.store.db import make_engine

from ..conftest import _pg_admin, fresh_database_url
from .conftest import Stack, make_stack

READ_TIMEOUT_SECONDS = MAX_WAIT_UNTIL_END_SECONDS + 30
"""Longer than the longest long poll a valid request may ask for: Schemathesis's own 10 s cut a read
of a pending task that asked to wait 10 s (``wait_until_end=10.0``) a moment before it answered."""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fuzzed_app(
    request: pytest.FixtureRequest,
    migrated_templates: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Stack, str]]:
    """The app both fuzzing tests call, with a driver and a deployment stored, and an admin's token."""
    tmp_path: Path = tmp_path_factory.mktemp(f"fuzz-{uuid.uuid4().hex[:6]}")
    url, to_drop = fresh_database_url(request.param, migrated_templates, tmp_path)
    engine = make_engine(url)
    stack = make_stack(engine, tmp_path / "data")
    stack.add_driver()
    token = stack.token_for("admin")
    stack.client.post(
        "/api/v1/deployments",
        json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
        headers=stack.headers(token),
    )
    with stack.client:  # its lifespan: the end stops the listening connection fuzzed claims start
        yield stack, token
    engine.dispose()
    if to_drop:
        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{to_drop}" WITH (FORCE)')


def _schema(fuzzed_app: tuple[Stack, str], phases: set[str]) -> OpenApiSchema:
    """The app's OpenAPI document, called as the admin, tested in the Schemathesis ``phases`` named."""
    stack, token = fuzzed_app
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", stack.client.app)
    schema.config.headers = {"Authorization": f"Bearer {token}"}
    for phase in ("examples", "fuzzing", "coverage"):
        schema.config.phases.get_by_name(name=phase).enabled = phase in phases
    return schema


@pytest.fixture(scope="module")
def api_schema(fuzzed_app: tuple[Stack, str]) -> OpenApiSchema:
    return _schema(fuzzed_app, {"examples", "fuzzing"})


@pytest.fixture(scope="module")
def api_schema_boundaries(fuzzed_app: tuple[Stack, str]) -> OpenApiSchema:
    return _schema(fuzzed_app, {"coverage"})


@schemathesis.hook
def map_query(_context: schemathesis.HookContext, query: dict[str, Any] | None) -> dict[str, Any] | None:
    """A valid long poll of a task that never ends (the fuzzed deployment's task stays pending) lasts
    as long as it asks, up to a minute: half a second here, so that a generated wait of 40 s costs
    the suite no 40 s. Invalid values go as generated."""
    wait = (query or {}).get("wait_until_end")
    if (
        query
        and isinstance(wait, int | float)
        and not isinstance(wait, bool)
        and 0.5 < wait <= MAX_WAIT_UNTIL_END_SECONDS
    ):
        return {**query, "wait_until_end": 0.5}
    return query


@schemathesis.serializer("application/gzip")
def _driver_archive(_ctx: schemathesis.SerializationContext, value: object) -> bytes:
    """Driver pushes take raw bytes: fuzz them with whatever bytes the schema's binary string gives."""
    return value if isinstance(value, bytes) else str(value).encode()


schema = schemathesis.pytest.from_fixture("api_schema")
schema_boundaries = schemathesis.pytest.from_fixture("api_schema_boundaries")


@schema.exclude(path="/api/v1/auth/logout").parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_fails_and_keeps_its_schema(case: schemathesis.Case) -> None:
    # Schema-valid requests may still break a product rule (an unknown driver, a token lifetime past
    # the server's maximum): those get a 4xx with a message, so "every valid request is accepted" is off.
    case.call_and_validate(excluded_checks=[positive_data_acceptance], timeout=READ_TIMEOUT_SECONDS)


@pytest.mark.slow
@schema_boundaries.exclude(path="/api/v1/auth/logout").parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_fails_and_keeps_its_schema_at_its_boundaries(case: schemathesis.Case) -> None:
    case.call_and_validate(excluded_checks=[positive_data_acceptance], timeout=READ_TIMEOUT_SECONDS)
