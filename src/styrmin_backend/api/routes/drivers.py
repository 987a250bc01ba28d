"""The driver registry: push, validate, list, show and download driver versions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from styrmin_backend.api.deps import Db, Reader, Writer, api_router
from styrmin_backend.api.errors import FieldError, error_response
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.schemas import DriverVersionOut
from styrmin_backend.domain.limits import DRIVER_ARCHIVE_MAX_BYTES
from styrmin_backend.drivers import DriverError, DriverReport
from styrmin_backend.services import drivers

router = api_router(tags=["drivers"])

NameParam = Annotated[str, Path(min_length=1, max_length=64)]
VersionParam = Annotated[str, Path(min_length=1, max_length=64)]
_ARCHIVE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The driver as a .tar.gz (styrminctl drivers push packs a folder for you).",
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    }
}


async def _archive(request: Request) -> bytes:
    """The request body, refused past the driver size limit without reading it all."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > DRIVER_ARCHIVE_MAX_BYTES:
            raise DriverError([])
    return bytes(data)


def _problems_response(report: DriverReport) -> JSONResponse:
    title = f"{report.name}@{report.version}" if report.name else "The driver"
    count = len(report.problems)
    return error_response(
        422,
        f"{title} is not valid: {count} problem{'s' if count != 1 else ''}; the first: {report.problems[0]}",
        "driver",
        errors=[
            FieldError(field=str(p).removesuffix(f": {p.message}"), message=p.message)
            for p in report.problems
        ],
    )


def _too_large() -> JSONResponse:
    return error_response(
        413, f"The driver archive is larger than {DRIVER_ARCHIVE_MAX_BYTES // (1024 * 1024)} MiB.", "driver"
    )


@router.post(
    "/drivers/validate",
    response_model=DriverReport,
    openapi_extra=_ARCHIVE_BODY,
    responses={
        413: {"description": "The archive is too large."},
        429: {"description": "The server is checking as many drivers as it allows at once; see Retry-After."},
    },
)
async def validate(request: Request, _: Reader) -> DriverReport | JSONResponse:
    """Validate a driver without storing it: every problem with its file, line and field.

    Open to every signed-in user: the driver's code is only read, never run, and the work is bounded.
    """
    try:
        data = await _archive(request)
    except DriverError:
        return _too_large()
    return await run_in_threadpool(drivers.validate_archive, data)  # 429 past the concurrent checks


@router.post(
    "/drivers",
    response_model=DriverVersionOut,
    status_code=201,
    openapi_extra=_ARCHIVE_BODY,
    responses={
        200: {"model": DriverVersionOut, "description": "The same content was already stored."},
        413: {"description": "The archive is too large."},
        429: {"description": "The server is checking as many drivers as it allows at once; see Retry-After."},
    },
)
async def push(
    request: Request, response: Response, db: Db, principal: Writer
) -> DriverVersionOut | JSONResponse:
    """Push a driver version: validated like `styrminctl drivers validate`, then stored immutably."""
    try:
        data = await _archive(request)
    except DriverError:
        return _too_large()
    package, report = await run_in_threadpool(drivers.check_archive, data)  # 429 past the concurrent checks
    if package is None or not report.valid:
        return _problems_response(report)
    pushed = await run_in_threadpool(drivers.push_driver, db, package, report, principal.username)
    if not pushed.created:
        response.status_code = 200
    return DriverVersionOut.of(pushed.driver)


@router.get("/drivers", response_model=list[DriverVersionOut])
def list_drivers(
    db: Db,
    _: Reader,
    request: Request,
    response: Response,
    name: Annotated[str | None, Query(max_length=64, description="Only the versions of this driver.")] = None,
    limit: Limit = 500,
    cursor: Cursor = None,
) -> list[DriverVersionOut]:
    """Every stored driver version, by name and then as pushed (or one driver's versions)."""
    found = [DriverVersionOut.of(row) for row in drivers.list_drivers(db, name)]
    return page_of(
        found,
        lambda d: f"{d.name}@{d.version}",
        limit=limit,
        cursor=cursor,
        request=request,
        response=response,
    )


@router.get("/drivers/{name}/versions/{version}", response_model=DriverVersionOut)
def get_driver(name: NameParam, version: VersionParam, db: Db, _: Reader) -> DriverVersionOut:
    """One driver version: its application, components and actions."""
    return DriverVersionOut.of(drivers.get_driver(db, name, version))


@router.get(
    "/drivers/{name}/versions/{version}/archive",
    response_class=Response,
    responses={200: {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}},
)
def download_driver(name: NameParam, version: VersionParam, db: Db, _: Reader) -> Response:
    """The driver version's .tar.gz, exactly as stored (its checksum is in the ETag)."""
    row = drivers.get_driver(db, name, version)
    return Response(
        row.archive,
        media_type="application/gzip",
        headers={
            "Content-Disposition": f'attachment; filename="{row.name}-{row.version}.tar.gz"',
            "ETag": f'"{row.checksum}"',
        },
    )
