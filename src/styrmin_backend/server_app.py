"""The server's FastAPI app: the REST API and the web UI on one database, above both."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Engine

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
from styrmin_backend.web import install_web, refused_page


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
    app.add_middleware(RefuseNulInRequestLine, page=refused_page)
    app.add_middleware(LimitRequestBody, page=refused_page)
    app.add_middleware(RequestMetrics)
    return app


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
