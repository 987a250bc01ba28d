"""Canaries of Styrmin's Prefect patches (``agent/prefect/_compat.py``): one per patch, each failing
with the patch's name when a Prefect upgrade changes what the patch relies on."""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from styrmin_backend.agent.prefect import _compat


@pytest.fixture
def prefect_api_url() -> Iterator[None]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        yield


def _holds(patch: str, condition: bool, what: str) -> None:
    assert patch in _compat.PATCHES
    assert condition, (
        f"Prefect patch {patch!r}: {what} changed in this Prefect version; fix or drop it in _compat.py"
    )


def test_every_patch_has_a_canary() -> None:
    canaries = {name.removeprefix("test_").removesuffix("_still_holds") for name in globals()}
    assert set(_compat.PATCHES) <= canaries


def test_flow_run_in_work_pool_still_holds() -> None:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.actions import FlowRunCreate

    fields = set(FlowRunCreate.model_fields)
    wanted = {
        "flow_id",
        "flow_version",
        "parameters",
        "state",
        "empirical_policy",
        "tags",
        "work_pool_name",
        "work_queue_name",
    }
    _holds("flow_run_in_work_pool", wanted <= fields, f"FlowRunCreate's fields {sorted(wanted - fields)}")
    _holds(
        "flow_run_in_work_pool",
        callable(getattr(PrefectClient, "create_flow", None)),
        "PrefectClient.create_flow",
    )


def test_skip_the_engines_first_update_still_holds() -> None:
    from prefect import flow_engine

    source = inspect.getsource(flow_engine)
    first_update = (
        "update_flow_run(\n                        flow_run_id=self.flow_run.id,\n"
        "                        flow_version=self.flow.version,\n"
        "                        empirical_policy=self.flow_run.empirical_policy,"
    )
    _holds(
        "skip_the_engines_first_update",
        source.count(first_update) == 2,
        "the engines' first update_flow_run(flow_version=..., empirical_policy=...)",
    )


def test_flow_run_made_running_still_holds() -> None:
    import prefect.server.models  # noqa: F401  (the policies import it, in a cycle)
    from prefect import flow_engine
    from prefect.server.models import flow_runs
    from prefect.server.orchestration import core_policy, global_policy
    from prefect.server.schemas.states import StateType
    from prefect.utilities import engine

    engines = [flow_engine.FlowRunEngine, flow_engine.AsyncFlowRunEngine]
    reads = [inspect.getsource(each.setup_run_context) for each in engines]
    _holds(
        "flow_run_made_running",
        "self.flow_run = client.read_flow_run(self.flow_run.id)" in reads[0]
        and "self.flow_run = await client.read_flow_run(self.flow_run.id)" in reads[1],
        "the engines' read of the flow run in setup_run_context",
    )
    _holds(
        "flow_run_made_running",
        all("new_state = Running()" in inspect.getsource(each.begin_run) for each in engines)
        and "partial(client.set_flow_run_state, flow_run_id, state, force=force)"
        in inspect.getsource(engine.propose_state),
        "the engines proposing Running() through client.set_flow_run_state",
    )
    # The creation orchestrates its state with force: the minimal policy (which still tells the
    # state change as an event) and the global rules, which count the run and set its start time.
    _holds(
        "flow_run_made_running",
        "force=True" in inspect.getsource(flow_runs.create_flow_run)
        and "GlobalFlowPolicy.compile_transition_rules" in inspect.getsource(flow_runs.set_flow_run_state),
        "create_flow_run setting its state with force, under the global rules",
    )
    first = (None, StateType.RUNNING)
    minimal = {rule.__name__ for rule in core_policy.MinimalFlowPolicy.compile_transition_rules(*first)}
    counted = {rule.__name__ for rule in global_policy.GlobalFlowPolicy.compile_transition_rules(*first)}
    _holds(
        "flow_run_made_running",
        "InstrumentFlowRunStateTransitions" in minimal
        and {"SetStartTime", "IncrementFlowRunCount"} <= counted,
        "the rules of a flow run's first Running state",
    )


def test_read_default_result_storage_once_still_holds() -> None:
    import prefect.results

    source = inspect.getsource(prefect.results)
    for name in _compat._RESULT_STORAGE_READERS:
        _holds(
            "read_default_result_storage_once",
            callable(getattr(prefect.results, name, None)) and source.count(f"{name}()") >= 2,
            f"prefect.results.{name} and its calls by name",
        )


def test_memoize_parameter_schemas_still_holds() -> None:
    import prefect.flows

    _holds(
        "memoize_parameter_schemas",
        "parameter_schema(self.fn)" in inspect.getsource(prefect.flows.Flow.__init__),
        "Flow.__init__ calling prefect.flows.parameter_schema",
    )


def test_memoize_parameter_validation_still_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefect.flows
    from prefect.exceptions import ParameterTypeError

    builds = re.findall(r"(?<!V1)ValidatedFunction\(\s*self\.fn, config=", inspect.getsource(prefect.flows))
    _holds(
        "memoize_parameter_validation",
        len(builds) == 2,
        "Flow.__init__ and Flow.validate_parameters building prefect.flows.ValidatedFunction",
    )
    monkeypatch.setattr(prefect.flows, "ValidatedFunction", prefect.flows.ValidatedFunction)
    built: list[object] = []
    build = prefect.flows.ValidatedFunction
    monkeypatch.setattr(
        prefect.flows, "ValidatedFunction", lambda *a, **k: built.append(a[0]) or build(*a, **k)
    )
    _compat.memoize_parameter_validation()

    def one(count: int, name: str = "x") -> None: ...

    def same(count: int, name: str = "x") -> None: ...

    def other(count: str, name: str = "x") -> None: ...

    flows = [prefect.flows.flow(fn) for fn in (one, same, other)]
    assert flows[1].validate_parameters({"count": "3"}) == {"count": 3, "name": "x"}
    with pytest.raises(ParameterTypeError):
        flows[0].validate_parameters({"count": "three"})
    assert flows[2].validate_parameters({"count": "3"}) == {"count": "3", "name": "x"}
    _holds("memoize_parameter_validation", built == [one, other], "one model built per signature")


def test_api_log_sink_still_holds() -> None:
    from prefect.logging import handlers

    _holds("api_log_sink", callable(getattr(handlers, "set_api_log_sink", None)), "set_api_log_sink")
    _holds(
        "api_log_sink",
        "emit_api_log(" in inspect.getsource(handlers.APILogHandler),
        "APILogHandler sending through emit_api_log",
    )


def test_action_settings_still_holds() -> None:
    settings = _compat.action_settings()

    _holds("action_settings", settings.flows.heartbeat_frequency is None, "flows.heartbeat_frequency")
    _holds(
        "action_settings",
        settings.client.server_version_check_enabled is False,
        "client.server_version_check_enabled",
    )


def test_clients_made_before_fork_still_holds(prefect_api_url: None) -> None:
    sync_clients, async_clients = _compat.client_contexts()
    before = [context.client._client.csrf_client_id for context in (sync_clients, async_clients)]

    _compat.own_client_identities(sync_clients, async_clients)

    after = [context.client._client.csrf_client_id for context in (sync_clients, async_clients)]
    _holds(
        "clients_made_before_fork", all(a != b for a, b in zip(after, before, strict=True)), "csrf_client_id"
    )


def test_complete_prefects_models_still_holds() -> None:
    from prefect.client.schemas.actions import FlowRunCreate
    from prefect.client.schemas.objects import FlowRun

    _compat.complete_prefects_models()

    _holds(
        "complete_prefects_models",
        FlowRunCreate.__pydantic_complete__ and FlowRun.__pydantic_complete__,
        "pydantic's deferred model building",
    )


def test_build_the_orchestration_result_model_still_holds() -> None:
    import os
    from typing import Any

    import prefect.utilities.engine
    from prefect.client.schemas import OrchestrationResult

    built = _compat.build_the_orchestration_result_model()
    _holds(
        "build_the_orchestration_result_model",
        "OrchestrationResult[Any]" in inspect.getsource(prefect.utilities.engine.propose_state),
        "propose_state's naming OrchestrationResult[Any] (else building it ahead saves nothing)",
    )
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # as an action's process, forked from the fork server: the model is there
        os.write(writing, b"same" if OrchestrationResult[Any] is built else b"new")
        os._exit(0)
    os.waitpid(child, 0)
    answer = os.read(reading, 16)
    os.close(reading)
    os.close(writing)
    _holds("build_the_orchestration_result_model", answer == b"same", "pydantic's cache of generic models")


async def _two_writers_one_read_first(database: str) -> int:
    """Writer one reads, then writer two reads and writes, then writer one writes: as two actions
    creating their flow runs at once do. Returns the rows written; raises what a writer raised."""
    import contextlib

    from prefect.server.database.configurations import AioSqliteConfiguration
    from sqlalchemy import text

    config = AioSqliteConfiguration(connection_url=f"sqlite+aiosqlite:///{database}")
    engine = await config.engine()
    async with engine.begin() as connection:
        await connection.exec_driver_sql("CREATE TABLE flow_run (n INTEGER)")
    one_read, two_wrote = asyncio.Event(), asyncio.Event()

    async def write(n: int) -> None:
        async with await config.session(engine) as session, config.begin_transaction(session):
            if n == 2:
                await one_read.wait()
            await session.execute(text("SELECT count(*) FROM flow_run"))
            if n == 1:
                one_read.set()
                # Unpatched, writer two commits meanwhile; patched, it waits for this one's commit.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(two_wrote.wait(), 1.0)
            await session.execute(text("INSERT INTO flow_run VALUES (:n)"), {"n": n})
        if n == 2:
            two_wrote.set()

    try:
        await asyncio.gather(write(1), write(2))
        async with engine.connect() as connection:
            return int((await connection.exec_driver_sql("SELECT count(*) FROM flow_run")).scalar_one())
    finally:
        await engine.dispose()


async def test_sqlite_writers_wait_their_turn_still_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.server.database.configurations import AioSqliteConfiguration
    from sqlalchemy.exc import OperationalError

    with pytest.raises(OperationalError, match="database is locked"):
        await _two_writers_one_read_first(str(tmp_path / "unpatched.db"))

    monkeypatch.setattr(AioSqliteConfiguration, "begin_transaction", AioSqliteConfiguration.begin_transaction)
    _compat.sqlite_writers_wait_their_turn()

    _holds(
        "sqlite_writers_wait_their_turn",
        await _two_writers_one_read_first(str(tmp_path / "patched.db")) == 2,
        "AioSqliteConfiguration.begin_transaction's BEGIN mode",
    )


def test_uuid_columns_declare_their_operators_still_holds() -> None:
    import uuid
    import warnings

    from prefect.server.utilities.database import UUID
    from sqlalchemy import column

    def compare() -> list[warnings.WarningMessage]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            column("id", UUID()) == uuid.uuid4()  # noqa: B015 (built, not used: the warning is the point)
        return caught

    declared = vars(UUID).get("operator_classes")
    try:
        if declared is not None:  # patched earlier in this process
            del UUID.operator_classes
        _holds(
            "uuid_columns_declare_their_operators",
            any("OperatorClass" in str(w.message) for w in compare()),
            "the UUID type declaring no operators (SQLAlchemy's warning on each comparison)",
        )
        assert _compat.uuid_columns_declare_their_operators()
        _holds("uuid_columns_declare_their_operators", not compare(), "SQLAlchemy's operator classes")
    finally:
        if declared is not None:
            UUID.operator_classes = declared


def test_background_worker_polls_less_still_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import timedelta

    from docket import Docket
    from prefect.server.api import background_workers

    monkeypatch.setattr(background_workers, "Worker", background_workers.Worker)
    _compat.background_worker_polls_less()

    worker = background_workers.Worker(Docket(name="canary", url="memory://canary"))
    every = timedelta(seconds=_compat.BACKGROUND_WORKER_POLL_SECONDS)
    _holds(
        "background_worker_polls_less",
        (worker.minimum_check_interval, worker.scheduling_resolution) == (every, every),
        "docket.Worker's minimum_check_interval and scheduling_resolution",
    )
    _holds(
        "background_worker_polls_less",
        "Worker(docket" in inspect.getsource(background_workers.background_worker),
        "background_worker making its docket.Worker by that name",
    )


async def test_cancellation_listener_waits_longer_still_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    from burner_redis.pubsub import PubSub
    from docket import Docket, Worker

    reads = 0
    docket_read = PubSub.get_message

    async def counted(self: PubSub, *args: object, **kwargs: object) -> object:
        nonlocal reads
        reads += 1
        return await docket_read(self, *args, **kwargs)

    monkeypatch.setattr(Worker, "_cancellation_listener", Worker._cancellation_listener)
    monkeypatch.setattr(PubSub, "get_message", counted)
    _compat.cancellation_listener_waits_longer()

    started, cancelled = asyncio.Event(), asyncio.Event()

    async def sleeps_long() -> None:
        started.set()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    docket = Docket(name="canary-cancel", url="memory://canary-cancel")
    async with docket, Worker(docket) as worker:
        running = asyncio.ensure_future(worker.run_forever())
        await docket.add(sleeps_long, key="canary-sleeps")()
        await asyncio.wait_for(started.wait(), 60)
        reads = 0
        await asyncio.sleep(3)
        quiet_reads = reads
        await docket.cancel("canary-sleeps")
        await asyncio.wait_for(cancelled.wait(), 60)  # a cancellation still reaches the task
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    _holds(
        "cancellation_listener_waits_longer",
        quiet_reads <= 3,  # docket's own listener reads 30 times in 3 s
        f"docket.Worker's cancellation listener reading its pub/sub ({quiet_reads} reads in 3 s)",
    )


def _serving(status: int, body: bytes) -> tuple[ThreadingHTTPServer, str]:
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/api"


def test_csrf_only_when_the_server_asks_still_holds(prefect_api_url: None) -> None:
    from prefect.client.base import PrefectHttpxAsyncClient

    _holds(
        "csrf_only_when_the_server_asks",
        "CSRF protection is disabled." in inspect.getsource(PrefectHttpxAsyncClient._add_csrf_headers),
        "the client's reading of the server's 422 answer",
    )
    unprotected, unprotected_url = _serving(422, b'{"detail":"CSRF protection is disabled."}')
    protected, protected_url = _serving(
        200, b'{"token":"t","client":"c","expiration":"2999-01-01T00:00:00Z"}'
    )
    try:
        contexts = _compat.client_contexts()
        assert not _compat.csrf_only_when_the_server_asks(protected_url, *contexts)
        assert all(context.client._client.enable_csrf_support for context in contexts)

        assert _compat.csrf_only_when_the_server_asks(unprotected_url, *contexts)
        _holds(
            "csrf_only_when_the_server_asks",
            not any(context.client._client.enable_csrf_support for context in contexts),
            "the clients' _client.enable_csrf_support",
        )
    finally:
        for server in (protected, unprotected):
            server.shutdown()
            server.server_close()
