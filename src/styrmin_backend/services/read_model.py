"""The base of the services' read models: what the interfaces see of a stored record."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select
from sqlalchemy.orm import Session


class ReadModel(BaseModel):
    """A frozen record built from its row by field name (``Model.model_validate(row)``), so the
    interfaces never hold a row and no code copies a row field by field."""

    model_config = ConfigDict(from_attributes=True, frozen=True)

    @classmethod
    def read_all(cls, session: Session, query: Select[Any]) -> list[Self]:
        """The records of ``query`` (a select of a table's columns), read as plain rows: a list of
        hundreds spent most of its time making ORM objects and reading their attributes back."""
        return [cls.model_validate(dict(row)) for row in session.execute(query).mappings()]
