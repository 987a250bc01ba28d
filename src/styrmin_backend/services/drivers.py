"""What the control plane needs to know of a stored driver version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.store.models import DriverRow


@dataclass(frozen=True)
class DriverInfo:
    """A stored driver version: its components and the application version it defaults to."""

    name: str
    version: str
    components: list[str]
    default_app_version: str


def driver_info(row: DriverRow) -> DriverInfo:
    """The facts of a stored driver row."""
    spec: dict[str, Any] = row.spec.get("spec", {})
    return DriverInfo(
        name=row.name,
        version=row.version,
        components=[c["name"] for c in spec.get("components", [])],
        default_app_version=str(spec.get("application", {}).get("version", "")),
    )


def get_driver_info(session: Session, name: str, version: str) -> DriverInfo:
    """The stored driver ``name@version``; raises InvalidInput naming what is stored instead."""
    row = session.scalars(
        select(DriverRow).where(DriverRow.name == name, DriverRow.version == version)
    ).first()
    if row is not None:
        return driver_info(row)
    versions = session.scalars(select(DriverRow.version).where(DriverRow.name == name)).all()
    if not versions:
        raise InvalidInput(
            f'There is no driver "{name}"; push it first with `styrminctl drivers push`.', field="driver"
        )
    raise InvalidInput(
        f"Driver {name} has no version {version}; stored versions: {', '.join(sorted(versions))}.",
        field="driver_version",
    )
