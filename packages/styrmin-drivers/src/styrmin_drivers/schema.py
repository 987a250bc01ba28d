"""The JSON Schema of ``driver.styrmin.yml`` for editors, generated from :class:`DriverSpec`.

Regenerate ``driver.schema.json`` after changing the spec's models: ``python -m styrmin_drivers.schema``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from styrmin_drivers.spec import DriverSpec

JSON_SCHEMA_FILE = Path(__file__).with_name("driver.schema.json")
JSON_SCHEMA_ID = "https://styrmin.io/schemas/driver.schema.json"


def driver_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``driver.styrmin.yml``."""
    schema = DriverSpec.model_json_schema(by_alias=True)
    schema["$id"] = JSON_SCHEMA_ID
    return schema


def json_schema_text() -> str:
    """The text that :data:`JSON_SCHEMA_FILE` must hold."""
    return json.dumps(driver_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    JSON_SCHEMA_FILE.write_text(json_schema_text())
    print(f"wrote {JSON_SCHEMA_FILE}")
