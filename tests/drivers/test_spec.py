"""The spec's models: the seed's example is valid, and the JSON Schema for editors is up to date."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.drivers import DEFAULT_ACTION_TIMEOUT_SECONDS, DriverError, load_driver_spec
from styrmin_drivers.schema import JSON_SCHEMA_FILE, driver_json_schema, json_schema_text
from tests.drivers.conftest import EXAMPLE_DRIVER, SPEC

SEED = Path(__file__).resolve().parents[3] / "shared" / "seed" / "lifecycle-hooks-and-actions.txt"

SPEC_HEAD = SPEC.split("  actions:")[0]


def test_seed_actions_with_a_spec_around_them_load() -> None:
    spec = load_driver_spec(SPEC)

    upgrade = spec.spec.actions[1]
    assert (upgrade.name, upgrade.hook, upgrade.mode) == ("upgrade", Hook.UPGRADE, Mode.CORE)
    assert (upgrade.file, upgrade.function) == ("actions.py", "upgrade")
    assert upgrade.description == "Stop workers, run migration, restart, verify"
    assert upgrade.timeout == DEFAULT_ACTION_TIMEOUT_SECONDS
    assert spec.spec.chart.path == "chart"
    assert spec.spec.component("server").workload.resolved_name("shop") == "shop-server"


@pytest.mark.skipif(not SEED.is_file(), reason=f"the seed is not beside the project ({SEED})")
def test_seed_yaml_as_written_in_the_seed_loads() -> None:
    text = SEED.read_text()
    start = text.index("spec:\n  actions:")
    block = text[start : text.index("\n\n", start)]
    spec = load_driver_spec(SPEC_HEAD + block.removeprefix("spec:\n"))
    assert [a.location for a in spec.spec.actions] == ["actions.py::pre_setup", "actions.py::upgrade"]


def test_json_schema_file_is_up_to_date() -> None:
    assert JSON_SCHEMA_FILE.read_text() == json_schema_text(), (
        "driver.schema.json is stale: run `python -m styrmin_drivers.schema`"
    )


def test_json_schema_accepts_the_example_and_refuses_an_unknown_mode() -> None:
    schema = driver_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    example = yaml.safe_load((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
    jsonschema.validate(example, schema)

    example["spec"]["actions"][0]["mode"] = "later"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(example, schema)


def test_json_schema_patterns_are_ecmascript() -> None:
    patterns = re.findall(r'"pattern": "([^"]*)"', json.dumps(driver_json_schema()))
    assert patterns and not [p for p in patterns if "(?P<" in p or "(?<" in p]


def test_timeout_may_be_set_per_action() -> None:
    spec = load_driver_spec(
        SPEC.replace(
            '      location: "actions.py::upgrade"\n',
            '      location: "actions.py::upgrade"\n      timeout: 900\n',
        )
    )
    assert spec.spec.actions[1].timeout == 900


def test_invalid_spec_raises_with_every_problem() -> None:
    text = SPEC.replace("mode: pre", "mode: later").replace("hook: upgrade", "hook: nightly")
    with pytest.raises(DriverError) as raised:
        load_driver_spec(text)
    assert [p.field for p in raised.value.problems] == ["spec.actions[0].mode", "spec.actions[1].hook"]


def test_model_refuses_setup_core_even_when_built_in_python() -> None:
    data = yaml.safe_load(SPEC.replace("mode: pre", "mode: core"))
    with pytest.raises(ValueError, match="the setup hook has no core action"):
        from styrmin_backend.drivers import DriverSpec

        DriverSpec.model_validate(data)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("{{ .Release.Name }}-server", True),
        ("{{.Release.Name}}-server", True),
        ("server", True),
        ("{{ .Values.name }}-server", False),
        ("{{ .Release.Name }}_Server", False),
    ],
)
def test_workload_name_may_use_only_the_release_name(name: str, valid: bool) -> None:
    text = SPEC.replace('"{{ .Release.Name }}-server"', json.dumps(name))
    if valid:
        load_driver_spec(text)
    else:
        with pytest.raises(DriverError, match=r"spec\.components\[0\]\.workload\.name"):
            load_driver_spec(text)
