"""The server's FastAPI app: the REST API and the web UI on one database, above both."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy import Engine
from starlette.exceptions import HTTPException as StarletteHTTPException

from styrmin_backend.api import LimitRequestBody, RefuseNulInRequestLine, install_api
from styrmin_backend.memory import keep_started_objects_out_of_garbage_collections
from styrmin_backend.metrics import RequestMetrics, server_registry
from styrmin_backend.prefect_logs import PrefectLogReader
from styrmin_backend.secret_keys import use_settings_keys
from styrmin_backend.services import backup_schedules
from styrmin_backend.settings import Settings
from styrmin_backend.store.claim_wakeups import ClaimWakeups
from styrmin_backend.store.db import database_unavailable, make_session_factory, transaction
from styrmin_backend.store.wakeups import LOCATION_CHECK, Waiters
from styrmin_backend.web import error_page, install_web, refused_page


def create_app(settings: Settings, engine: Engine) -> FastAPI:
    """The server's app on a migrated database ``engine`` (given the secret keys of ``settings``)."""
    use_settings_keys(engine, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _run_schedules_periodically(app):
            keep_started_objects_out_of_garbage_collections()
            yield
        app.state.claim_wakeups.close()
        for judging in list(app.state.presence_judgements):  # the server stops: it judges no one
            judging.cancel()

    app = FastAPI(
        lifespan=lifespan,
        title="Styrmin",
        version="0.1.0",
        description="Deploy and upgrade applications on Kubernetes.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = make_session_factory(engine)
    app.state.metrics = server_registry(engine)
    # Set when the server is asked to stop: /readyz fails and agents' long polls answer at once.
    app.state.stopping = threading.Event()
    # The agents' waiting claims of this process, woken by PostgreSQL's NOTIFY of a new task.
    app.state.claim_wakeups = ClaimWakeups(engine)
    # The agents' waiting asks for a backup location to check, woken by the commit that sets one.
    app.state.location_waiters = LOCATION_CHECK.waiters()
    # The agents' presence connections, woken when the server stops, and the checks of those that
    # closed (see api.routes.agent.presence).
    app.state.presence_waiters = Waiters()
    app.state.presence_judgements = set()
    app.state.presence_open = Counter()
    # Read at each log request: `styrmin up` sets the Prefect URL once its Prefect has started.
    app.state.flow_run_logs = lambda: PrefectLogReader(app.state.settings.effective_prefect_api_url)
    install_api(app)
    install_web(app)
    _answer_browsers_with_pages(app)
    app.add_middleware(RefuseNulInRequestLine, page=refused_page)
    app.add_middleware(LimitRequestBody, page=refused_page)
    app.add_middleware(RequestMetrics)
    return app


_JSON_PATHS = ("/api/", "/healthz", "/readyz", "/metrics")
"""Where a program asks: errors there stay the API's JSON."""


def _answer_browsers_with_pages(app: FastAPI) -> None:
    """Answer an address no page answers, a wrong method, or an unreadable path or query value with the
    UI's error page outside the API: a browser showed the API's JSON for them (``/nonexistent``)."""
    json_http = app.exception_handlers[StarletteHTTPException]
    json_invalid = app.exception_handlers[RequestValidationError]

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        if request.url.path.startswith(_JSON_PATHS):
            return await _answered(json_http, request, error)
        page = error_page(request, error.status_code, _page_message(error.status_code, str(error.detail)))
        page.headers.update(error.headers or {})
        return page

    async def invalid(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        if request.url.path.startswith(_JSON_PATHS):
            return await _answered(json_invalid, request, error)
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("path", "query"))
        said = str(first.get("msg", "is not valid")).removeprefix("Value error, ")
        return error_page(request, 422, f"The address is not one Styrmin can read: {where}: {said}.")

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)


async def _answered(
    handler: Callable[[Request, Exception], Any], request: Request, error: Exception
) -> Response:
    """What an exception handler answers, whether it is a coroutine function or a plain one."""
    answer = handler(request, error)
    if inspect.isawaitable(answer):
        answer = await answer
    assert isinstance(answer, Response)
    return answer


def _page_message(status: int, detail: str) -> str:
    if status == 404:
        return "No page is at this address. The deployments list links to every deployment."
    if status == 405:
        return "This address takes a form, not a visit: go back to the page that has it."
    return detail


log = logging.getLogger("styrmin.schedules")


@asynccontextmanager
async def _run_schedules_periodically(app: FastAPI) -> AsyncIterator[None]:
    """While the server serves: start due scheduled backups and prune old ones, every so often."""

    def tick() -> None:
        with transaction(app.state.session_factory) as session:
            started, pruned = backup_schedules.run_schedules(session)
        if started or pruned:
            log.info("Scheduled backups started: %s; pruned: %s", started, pruned)

    async def loop() -> None:
        while True:
            await asyncio.sleep(app.state.settings.schedule_seconds)
            try:
                await run_in_threadpool(tick)
            except Exception as error:  # a busy database must not stop the schedules
                if database_unavailable(error):
                    # The engine logs the outage once; a traceback every period would bury it.
                    log.debug("The backup schedules wait for the database: %s", type(error).__name__)
                else:
                    log.exception("Running the backup schedules failed; trying again later")

    running = asyncio.create_task(loop(), name="backup-schedules")
    try:
        yield
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
