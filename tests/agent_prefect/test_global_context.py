"""The context every action gets: serialisable, secret-free, and typed by Prefect from a dict."""

from __future__ import annotations

import json

from prefect import flow

from styrmin_backend.actions import GlobalContext
from tests.agent_prefect.conftest import make_context


def test_global_context_survives_a_json_round_trip() -> None:
    context = GlobalContext.model_validate(make_context())

    assert GlobalContext.model_validate(json.loads(context.model_dump_json())) == context
    assert context.configuration.images["server"] == "registry.local:5000/shop:{{ app.version }}"


def test_global_context_has_no_field_for_a_token() -> None:
    names = set(GlobalContext.model_fields)

    assert not {name for name in names if "token" in name or "secret" in name or "password" in name}
    assert "api_url" in names


def test_prefect_turns_a_dict_parameter_into_a_global_context() -> None:
    @flow
    def action(context: GlobalContext) -> None:
        """Never run: only its parameters are validated."""

    parameters = action.validate_parameters({"context": make_context()})

    assert isinstance(parameters["context"], GlobalContext)
    assert parameters["context"].deployment_name == "shop"
