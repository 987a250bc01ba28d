"""The driver registry: pushing driver versions (immutable, with a checksum) and reading them."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import Conflict, InvalidInput, NotFound, TooManyAttempts
from styrmin_backend.domain.limits import CONCURRENT_DRIVER_CHECKS, DRIVER_CHECK_RETRY_AFTER_SECONDS
from styrmin_backend.drivers import (
    DriverError,
    DriverPackage,
    DriverReport,
    DriverSpec,
    read_driver_archive,
    validate_driver,
)
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.store.models import DriverRow


@dataclass(frozen=True)
class DriverInfo:
    """A stored driver version: its components and the application version it defaults to."""

    name: str
    version: str
    components: list[str]
    default_app_version: str


class DriverVersion(ReadModel):
    """A stored driver version as lists show it: its spec and checksum, who pushed it and when."""

    id: int
    name: str
    version: str
    checksum: str
    spec: dict[str, Any]
    pushed_by: str
    pushed_at: datetime


class Driver(DriverVersion):
    """A stored driver version as pushed, with its archive (up to 32 MiB: read only to use it)."""

    archive: bytes


@dataclass(frozen=True)
class Pushed:
    """A pushed driver version; ``created`` is False when the same content was already stored."""

    driver: Driver
    created: bool


class StoredDriver(Protocol):
    """What reading a driver version's spec needs of it (its row or its read model)."""

    @property
    def spec(self) -> Mapping[str, Any]: ...


def stored_spec(row: StoredDriver) -> DriverSpec:
    """The spec of a stored driver version."""
    return DriverSpec.model_validate(row.spec)


def get_driver_row(session: Session, name: str, version: str) -> DriverRow:
    """The stored driver ``name@version``; raises NotFound naming what is stored instead."""
    row = session.scalars(
        select(DriverRow).where(DriverRow.name == name, DriverRow.version == version)
    ).first()
    if row is not None:
        return row
    versions = session.scalars(select(DriverRow.version).where(DriverRow.name == name)).all()
    if not versions:
        raise NotFound(
            f'There is no driver "{name}"; push it first with `styrminctl drivers push`.', field="driver"
        )
    raise NotFound(
        f"Driver {name} has no version {version}; stored versions: {', '.join(sorted(versions))}.",
        field="driver_version",
    )


def get_driver(session: Session, name: str, version: str) -> Driver:
    """The stored driver ``name@version``; raises NotFound naming what is stored instead."""
    return Driver.model_validate(get_driver_row(session, name, version))


_DRIVER_SPEC = select(DriverRow.spec).where(
    DriverRow.name == bindparam("name"), DriverRow.version == bindparam("version")
)
"""A driver version's spec without its archive (a chart with its dependencies may be megabytes): each
change's request and each claim read it."""


def spec_of(session: Session, name: str, version: str) -> dict[str, Any] | None:
    """The stored spec of driver ``name@version`` (not validated again), or None when it is not stored."""
    spec: dict[str, Any] | None = session.scalar(_DRIVER_SPEC, {"name": name, "version": version})
    return spec


def get_driver_info(session: Session, name: str, version: str) -> DriverInfo:
    """The stored driver ``name@version`` for a change; raises InvalidInput when it is not stored."""
    stored = spec_of(session, name, version)
    if stored is None:
        try:  # raises, naming the versions stored (or finds one pushed since)
            stored = get_driver_row(session, name, version).spec
        except NotFound as error:
            raise InvalidInput(error.message, field=error.field) from error
    spec = DriverSpec.model_validate(stored)
    return DriverInfo(
        name=name,
        version=version,
        components=[c.name for c in spec.spec.components],
        default_app_version=spec.spec.application.default_version,
    )


_LISTED = [getattr(DriverRow, field) for field in DriverVersion.model_fields]


def list_drivers(session: Session, name: str | None = None) -> list[DriverVersion]:
    """Every stored driver version (or those of driver ``name``), by name then push order; without
    their archives, which a list never needs."""
    query = select(*_LISTED).order_by(DriverRow.name, DriverRow.id)
    if name is not None:
        query = query.where(DriverRow.name == name)
    return [DriverVersion.model_validate(row._mapping) for row in session.execute(query)]


class DriverChecksBusy(TooManyAttempts):
    """This server already runs as many driver checks (pushes, validations) as it allows at once."""

    def __init__(self) -> None:
        super().__init__(
            f"The server is already checking {CONCURRENT_DRIVER_CHECKS} drivers (pushes and validations "
            f"together); send the driver again in about {DRIVER_CHECK_RETRY_AFTER_SECONDS} s.",
            retry_after=DRIVER_CHECK_RETRY_AFTER_SECONDS,
            field="driver",
        )


# Checks are refused rather than queued when all slots are taken: a queue would hold each waiting
# upload (up to 32 MiB) in memory, and a client can retry as well as a server can wait.
_check_slots = threading.BoundedSemaphore(CONCURRENT_DRIVER_CHECKS)


@contextmanager
def _check_slot() -> Iterator[None]:
    if not _check_slots.acquire(blocking=False):
        raise DriverChecksBusy()
    try:
        yield
    finally:
        _check_slots.release()


def driver_check_slot() -> AbstractContextManager[None]:
    """One of this server's driver check slots, which previews' renders share with pushes.

    Raises:
        DriverChecksBusy: when this server already runs its most checks at once.
    """
    return _check_slot()


def validate_archive(data: bytes) -> DriverReport:
    """Validate a driver archive without storing it; bounded like :func:`check_archive`.

    Raises:
        DriverChecksBusy: when this server already runs its most checks at once.
    """
    with _check_slot():
        return validate_driver(data)


def check_archive(data: bytes) -> tuple[DriverPackage | None, DriverReport]:
    """Read and validate a driver archive: the package (None when unreadable) and every problem found.

    Slow (it renders the chart in a process of its own; no driver code runs) and touches no
    database: call it before opening a transaction.

    Raises:
        DriverChecksBusy: when this server already runs its most checks at once.
    """
    with _check_slot():
        try:
            package = read_driver_archive(data)
        except DriverError:
            # Report every problem, as `styrminctl drivers validate` would, not only the first.
            return None, validate_driver(data)
        return package, validate_driver(package)


def push_driver(session: Session, package: DriverPackage, report: DriverReport, pushed_by: str) -> Pushed:
    """Store a validated driver version; the same content again is a no-op, other content is refused."""
    if not report.valid:
        raise InvalidInput(
            f"{package.name}@{package.version} is not valid: " + "; ".join(str(p) for p in report.problems),
            field="driver",
        )
    existing = session.scalars(
        select(DriverRow).where(DriverRow.name == package.name, DriverRow.version == package.version)
    ).first()
    if existing is not None:
        if existing.checksum == package.checksum:
            return Pushed(Driver.model_validate(existing), created=False)
        raise Conflict(
            f"{package.name}@{package.version} is already stored with other content (checksum "
            f"{existing.checksum[:19]}, yours {package.checksum[:19]}); a pushed version never changes. "
            "Raise metadata.version in driver.styrmin.yml and push again.",
            field="metadata.version",
        )
    row = DriverRow(
        name=package.name,
        version=package.version,
        checksum=package.checksum,
        spec=package.spec.model_dump(mode="json", by_alias=True),
        archive=package.archive,
        pushed_by=pushed_by,
        pushed_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return Pushed(Driver.model_validate(row), created=True)
