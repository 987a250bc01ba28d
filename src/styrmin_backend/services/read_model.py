"""The base of the services' read models: what the interfaces see of a stored record."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ReadModel(BaseModel):
    """A frozen record built from its row by field name (``Model.model_validate(row)``), so the
    interfaces never hold a row and no code copies a row field by field."""

    model_config = ConfigDict(from_attributes=True, frozen=True)
