"""Every use Styrmin makes of Prefect's private parts, in one place.

Each function here relies on something Prefect does not promise to keep (a private function, the
order of its engine's calls, a field of a request body). ``tests/agent_prefect/test_prefect_compat.py``
holds one canary per entry of ``PATCHES``: after a Prefect upgrade, a canary that fails names the
patch whose ground moved, so it is fixed or dropped knowingly rather than silently doing nothing.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final
from uuid import UUID

from styrmin_backend.agent.prefect import _protocol

PATCHES: Final = (
    "flow_run_in_work_pool",
    "skip_the_engines_first_update",
    "flow_run_made_running",
    "read_default_result_storage_once",
    "memoize_parameter_schemas",
    "memoize_parameter_validation",
    "api_log_sink",
    "action_settings",
    "clients_made_before_fork",
    "complete_prefects_models",
    "build_the_orchestration_result_model",
    "sqlite_writers_wait_their_turn",
    "uuid_columns_declare_their_operators",
    "background_worker_polls_less",
    "cancellation_listener_waits_longer",
    "csrf_only_when_the_server_asks",
)
"""The names of the patches below; each has a canary test of the same name."""


class PrefectCompatibilityError(RuntimeError):
    """This Prefect version no longer has what a patch of ``_compat`` relies on."""

    def __init__(self, patch: str, what: str) -> None:
        super().__init__(
            f"Styrmin's Prefect patch {patch!r} relies on {what}, which this Prefect version lacks; "
            f"fix or drop the patch in styrmin_backend/agent/prefect/_compat.py."
        )
        self.patch = patch


# --- flow_run_in_work_pool -----------------------------------------------------------------------


async def create_flow_run_in_work_pool(
    client: Any,
    action: Any,
    *,
    flow_id: str | None,
    parameters: dict[str, Any],
    name: str | None,
    tags: list[str],
    work_pool: str | None,
    work_queue: str | None,
) -> Any:
    """The action's flow run, Running, in the agent's work pool and queue, made with one request.

    Prefect's ``create_flow_run`` takes no work pool (only a deployment's runs get one), and asks
    the server for the flow's id first. The request body here is the one it sends
    (``FlowRunCreate``), with the flow's id the agent knows from an earlier run and the pool's
    names. A server that no longer has that flow refuses it: the flow is then made again. The run
    is made Running, not Pending: this process runs it at once (see ``flow_run_made_running``).
    """
    from prefect.client.schemas.actions import FlowRunCreate
    from prefect.client.schemas.objects import FlowRun, FlowRunPolicy
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.states import Running, to_state_create

    def body(known_flow_id: Any) -> dict[str, Any]:
        create = FlowRunCreate(
            flow_id=known_flow_id,
            flow_version=action.version,
            name=name,
            parameters=parameters,
            context={},
            tags=list(tags),
            parent_task_run_id=None,
            state=to_state_create(Running()),
            empirical_policy=FlowRunPolicy(
                retries=action.retries, retry_delay=int(action.retry_delay_seconds or 0)
            ),
            work_pool_name=work_pool,
            work_queue_name=work_queue if work_pool else None,
        )
        return create.model_dump(mode="json", exclude_unset=True)

    if flow_id is not None:
        try:
            response = await client.request("POST", "/flow_runs/", json=body(flow_id))
        except PrefectHTTPStatusError:  # the flow is gone (its server's database was reset)
            pass
        else:
            return _flow_run(FlowRun, response, parameters)
    new_flow_id = await client.create_flow(action)
    response = await client.request("POST", "/flow_runs/", json=body(new_flow_id))
    return _flow_run(FlowRun, response, parameters)


def _flow_run(model: Any, response: Any, parameters: dict[str, Any]) -> Any:
    flow_run = model.model_validate(response.json())
    flow_run.parameters = parameters
    return flow_run


# --- answered here: the engine's calls this process can answer itself ---------------------------

_SEND = object()
"""What a local answer returns when the call must go to the Prefect server after all."""


def _answer_locally(method: str, local: Callable[..., Any]) -> None:
    """Answer ``method`` of both Prefect clients with ``local(*args, **kwargs)``, and send the call
    when that returns ``_SEND``. (This process runs one flow run, so patching the classes is safe.)"""
    from prefect.client.orchestration import PrefectClient, SyncPrefectClient

    send_async, send_sync = getattr(PrefectClient, method), getattr(SyncPrefectClient, method)

    async def answer_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = local(*args, **kwargs)
        return await send_async(self, *args, **kwargs) if answer is _SEND else answer

    def answer_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = local(*args, **kwargs)
        return send_sync(self, *args, **kwargs) if answer is _SEND else answer

    setattr(PrefectClient, method, answer_async)
    setattr(SyncPrefectClient, method, answer_sync)


# --- skip_the_engines_first_update ---------------------------------------------------------------


def skip_the_engines_first_update(created: Any) -> None:
    """Spare the engine its first call, which changes nothing on a flow run made here.

    Given a flow run, Prefect's engine first sends the flow's version and retry policy to it
    (``update_flow_run``); the flow run was made with both, from the same flow. That call is
    answered here, unsent, when it carries exactly what the flow run was made with; any other
    update is sent.
    """
    version, policy = created.flow_version, created.empirical_policy.model_copy()

    def unchanged(flow_run_id: Any, *args: Any, **changes: Any) -> Any:
        if (
            flow_run_id == created.id
            and not args
            and set(changes) == {"flow_version", "empirical_policy"}
            and changes["flow_version"] == version
            and changes["empirical_policy"] == policy
        ):
            return None  # the engine does not use the answer
        return _SEND

    _answer_locally("update_flow_run", unchanged)


# --- flow_run_made_running -----------------------------------------------------------------------


def flow_run_made_running(created: Any) -> None:
    """Let the engine start a flow run that its creation already made Running, without two calls.

    Given a Pending flow run, Prefect's engine proposes Running, then reads the whole flow run back
    to set up the run's context. A flow run made here is made Running by its creation, which the
    server orchestrates with the rules that matter here: ``force`` skips the core policy, whose rules
    for a first Running concern a deployment's concurrency lease and a repeated transition id, which
    an action's run never has; the minimal policy still tells the change as an event, and the global
    rules count the run and set its start time. So the engine's first Running proposal for
    ``created`` is answered here with the creation's state, accepted, and the read that follows
    with ``created`` itself, which is what the server holds. Every other proposal and read (a
    retry's, a final state, another flow run's) is sent.
    """
    from prefect.client.schemas import OrchestrationResult, SetStateStatus, StateAcceptDetails

    proposed: list[bool] = []
    read: list[bool] = []

    def accepted(flow_run_id: Any, state: Any, force: bool = False) -> Any:
        made = created.state
        if proposed or flow_run_id != created.id or force or made is None or not made.is_running():
            return _SEND
        if not state.is_running():
            return _SEND
        proposed.append(True)
        return OrchestrationResult(state=made, status=SetStateStatus.ACCEPT, details=StateAcceptDetails())

    def known(flow_run_id: Any) -> Any:
        if read or not proposed or flow_run_id != created.id:
            return _SEND
        read.append(True)
        return created

    _answer_locally("set_flow_run_state", accepted)
    _answer_locally("read_flow_run", known)


# --- read_default_result_storage_once ------------------------------------------------------------

_RESULT_STORAGE_READERS: Final = (
    "_aread_server_default_result_storage_block_id",
    "_read_server_default_result_storage_block_id",
)


class _DefaultResultStorage:
    """The Prefect server's default result storage, read at most once per flow run instead of twice.

    Prefect's engine asks the server for it while starting a flow run, once to decide whether
    results persist (async) and once for the result store (sync): two calls in a row, with the same
    answer. A process runs one flow run, so the first answer holds for the rest of it. The read
    starts as the job arrives, beside the flow run's first calls to the server; or the job brings
    the answer the agent read less than a minute before (``known``), and the process asks nothing.
    """

    def __init__(self, read_async: Any, read_sync: Any) -> None:
        self._read_async = read_async
        self._read_sync = read_sync
        self._answer: list[Any] = []
        self._reading: asyncio.Future[Any] | None = None

    def start_reading(self) -> None:
        if self._reading is None and not self._answer:
            self._reading = asyncio.ensure_future(self._read_async())

    def known(self, block_id: UUID | None) -> None:
        self._answer[:] = [block_id]

    async def first_answer_async(self) -> Any:
        if not self._answer:
            answer = await (self._reading if self._reading is not None else self._read_async())
            self._answer[:] = self._answer or [answer]
        return self._answer[0]

    def first_answer_sync(self) -> Any:
        if not self._answer:
            # Called on the event loop's thread, it cannot wait there for a read still running.
            reading = self._reading
            done = reading is not None and reading.done() and reading.exception() is None
            self._answer[:] = [reading.result() if reading is not None and done else self._read_sync()]
        return self._answer[0]


_default_result_storage: list[_DefaultResultStorage] = []


def read_default_result_storage_once() -> None:
    """Make a flow run read the Prefect server's default result storage once (``_DefaultResultStorage``)."""
    import prefect.results

    read_async, read_sync = (getattr(prefect.results, name, None) for name in _RESULT_STORAGE_READERS)
    if read_async is None or read_sync is None:
        raise PrefectCompatibilityError(
            "read_default_result_storage_once", "prefect.results." + " and ".join(_RESULT_STORAGE_READERS)
        )
    storage = _DefaultResultStorage(read_async, read_sync)
    _default_result_storage[:] = [storage]
    setattr(prefect.results, _RESULT_STORAGE_READERS[0], storage.first_answer_async)
    setattr(prefect.results, _RESULT_STORAGE_READERS[1], storage.first_answer_sync)


def start_reading_the_default_result_storage(known: _protocol.KnownResultStorage | None = None) -> None:
    """Take ``known``, the answer the agent read lately; without one, start the one read (in a forked
    process: a fresh read of its own)."""
    for storage in _default_result_storage:
        if known is not None:
            storage.known(UUID(known.block_id) if known.block_id else None)
        else:
            storage.start_reading()


# --- memoize_parameter_schemas -------------------------------------------------------------------


def memoize_parameter_schemas() -> None:
    """Make Prefect compute each flow parameters' JSON schema once per signature in this process.

    Prefect computes it for every ``@flow`` as the driver's module is imported (the schema of a
    ``GlobalContext`` parameter takes ~25 ms, more on a busy machine), although a flow run never uses
    it; an ``actions.py`` holds several flows with the same parameters. Computed once for the usual
    signatures before the job arrives, the action's module imports without it. The schema depends
    only on the parameters (name, kind, default, annotation) and their docstrings: the key.
    """
    import prefect.flows
    from prefect.utilities.callables import generate_parameter_schema, parameter_docstrings

    if not callable(getattr(prefect.flows, "parameter_schema", None)):
        raise PrefectCompatibilityError("memoize_parameter_schemas", "prefect.flows.parameter_schema")
    schemas: dict[Any, Any] = {}

    def parameter_schema(fn: Any) -> Any:
        try:
            signature = inspect.signature(fn, eval_str=True)
        except (NameError, TypeError):
            signature = inspect.signature(fn)
        docstrings = parameter_docstrings(inspect.getdoc(fn))
        key = (
            tuple((p.name, p.kind, repr(p.default), p.annotation) for p in signature.parameters.values()),
            tuple(sorted(docstrings.items())),
        )
        try:
            schema = schemas.get(key)
        except TypeError:  # an annotation that cannot be a key
            return generate_parameter_schema(signature, docstrings)
        if schema is None:
            schema = schemas[key] = generate_parameter_schema(signature, docstrings)
        return schema.model_copy(deep=True)

    prefect.flows.parameter_schema = parameter_schema  # type: ignore[attr-defined]


# --- memoize_parameter_validation ----------------------------------------------------------------


def memoize_parameter_validation() -> None:
    """Make Prefect build each flow parameters' validation model once per signature in this process.

    Prefect builds a pydantic model of a flow's parameters (``ValidatedFunction``, ~1.5 ms) when the
    flow is declared, to fail early, and again to validate each run's parameters: in an action's
    process, once per ``@flow`` of ``actions.py`` and once more for the run. The model depends only
    on the parameters (name, kind, default, annotation, resolved as the flow's module means them)
    and the config: the key. Built once for the usual signatures before the job arrives, a run
    uses it as it is. A signature whose annotations do not resolve, or whose defaults or
    annotations cannot be a key, gets a model of its own each time, as before.
    """
    import prefect.flows

    build = getattr(prefect.flows, "ValidatedFunction", None)
    if build is None:
        raise PrefectCompatibilityError("memoize_parameter_validation", "prefect.flows.ValidatedFunction")
    built: dict[Any, Any] = {}

    def validated_function(function: Any, config: Any = None) -> Any:
        try:
            signature = inspect.signature(function, eval_str=True)
            key = (
                tuple(
                    (p.name, p.kind, type(p.default), p.default, p.annotation)
                    for p in signature.parameters.values()
                ),
                tuple(sorted((config or {}).items())),
            )
            found = built.get(key)
        except Exception:  # an annotation that does not resolve, or a part that cannot be a key
            return build(function, config=config)
        if found is None:
            found = built[key] = build(function, config=config)
        return found

    prefect.flows.ValidatedFunction = validated_function  # type: ignore[attr-defined,misc,assignment]


# --- api_log_sink --------------------------------------------------------------------------------


def send_logs_to(sink: Callable[[dict[str, Any]], None]) -> None:
    """Hand each log record the flow run would send to the Prefect server to ``sink`` instead.

    The agent sends them: it still has them when the action's process is killed, so a crashed
    run's logs are complete.
    """
    from prefect.logging import handlers

    set_sink = getattr(handlers, "set_api_log_sink", None)
    if set_sink is None:
        raise PrefectCompatibilityError("api_log_sink", "prefect.logging.handlers.set_api_log_sink")
    set_sink(sink)


# --- action_settings ----------------------------------------------------------------------------


def action_settings() -> Any:
    """The current Prefect settings, without flow run heartbeats and the client's version check.

    Heartbeats would only tell the server that the process is alive, which the agent watches
    itself (and the sync engine's heartbeat thread costs ~1 s at the end of every run). The version
    check costs each action a request; the agent checks the Prefect server itself. Computed once
    in the fork server: building Prefect's settings costs ~0.1 s of CPU.
    """
    from prefect.context import get_settings_context

    settings = get_settings_context().settings
    for section, name in (("flows", "heartbeat_frequency"), ("client", "server_version_check_enabled")):
        if not hasattr(getattr(settings, section, None), name):
            raise PrefectCompatibilityError("action_settings", f"the setting {section}.{name}")
    return settings.copy_with_update(
        updates={"flows.heartbeat_frequency": None, "client.server_version_check_enabled": False}
    )


# --- clients_made_before_fork --------------------------------------------------------------------


def client_contexts() -> tuple[Any, Any]:
    """Prefect's sync and async client contexts, made but not entered (no connection, no loop).

    Made in the fork server, so that an action's process does not build its own (each loads the
    CA bundle into an SSL context: ~0.1 s of CPU). The forked process enters them: its
    connections are its own. Call ``own_client_identities`` in the forked process first.
    """
    from prefect.context import AsyncClientContext, SyncClientContext

    return SyncClientContext(), AsyncClientContext()


def own_client_identities(*contexts: Any) -> None:
    """Give each client of ``contexts`` a CSRF client id of its own (forks share the parent's)."""
    import uuid

    for context in contexts:
        http = getattr(context.client, "_client", None)
        if http is None or not hasattr(http, "csrf_client_id"):
            raise PrefectCompatibilityError("clients_made_before_fork", "the clients' _client.csrf_client_id")
        http.csrf_client_id = uuid.uuid4()


def csrf_only_when_the_server_asks(api_url: str, *contexts: Any) -> bool:
    """Ask the Prefect server once, in the fork server, whether it wants CSRF tokens; when it does
    not, the clients of ``contexts`` ask for none. Returns whether they stopped asking.

    Prefect's client asks for a token before its first change request, and stops asking after the
    server's 422 "CSRF protection is disabled.". Made before the fork, every action's process asked
    again: a request per action, to both servers' cost. A server that wants tokens, or does not
    answer now, leaves the clients as Prefect made them.
    """
    import uuid

    import httpx

    try:
        answer = httpx.get(
            f"{api_url.rstrip('/')}/csrf-token", params={"client": str(uuid.uuid4())}, timeout=5
        )
    except httpx.HTTPError:
        return False
    if answer.status_code != 422 or "CSRF protection is disabled." not in answer.text:
        return False
    for context in contexts:
        http = getattr(context.client, "_client", None)
        if http is None or not isinstance(getattr(http, "enable_csrf_support", None), bool):
            raise PrefectCompatibilityError(
                "csrf_only_when_the_server_asks", "the clients' _client.enable_csrf_support"
            )
        http.enable_csrf_support = False
    return True


# --- complete_prefects_models --------------------------------------------------------------------

_MODEL_MODULES: Final = (
    "prefect.client.schemas.objects",
    "prefect.client.schemas.actions",
    "prefect.client.schemas.responses",
    "prefect.client.schemas.filters",
    "prefect.context",
)


def complete_prefects_models() -> int:
    """Build the validators Prefect's API models defer to their first use (~0.1 s of CPU in a flow run).

    Returns how many models were completed.
    """
    import importlib

    from pydantic import BaseModel

    completed = 0
    for name in _MODEL_MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == name
                and not value.__pydantic_complete__
            ):
                value.model_rebuild()
                completed += 1
    return completed


# --- build_the_orchestration_result_model --------------------------------------------------------

_BUILT_MODELS: list[Any] = []
"""The generic models built ahead, held so that pydantic's cache of them (weak) keeps them."""


def build_the_orchestration_result_model() -> Any:
    """Build ``OrchestrationResult[Any]`` before any flow run does; returns it.

    Prefect's ``propose_state`` names that generic model in the annotations of a function it defines
    on each call, so a flow run's first state proposal builds it (about 4 ms of CPU in each action's
    process) unless pydantic's cache already holds it. Built in the fork server, every child finds it.
    """
    from prefect.client.schemas import OrchestrationResult

    built = OrchestrationResult[Any]
    _BUILT_MODELS[:] = [built]
    return built


# --- sqlite_writers_wait_their_turn (in the Prefect server's process) ---------------------------


def sqlite_writers_wait_their_turn() -> None:
    """Make every transaction Prefect's server begins on SQLite take the write lock first.

    Prefect begins them ``DEFERRED``: a transaction that read and then writes while another writer
    holds the database fails at once with "database is locked" (SQLite gives up rather than
    deadlock; its busy timeout never applies). The server answers 503 and Prefect's client tries
    again 2 s later. So two actions that started at once each waited 2 s: two upgrades side by side
    took 2.9 s against 1 s for one. ``BEGIN IMMEDIATE`` makes the second writer wait for the first
    under the busy timeout instead, a few milliseconds. Only the SQLite configuration changes.
    """
    from contextlib import asynccontextmanager

    from prefect.server.database import configurations

    sqlite = getattr(configurations, "AioSqliteConfiguration", None)
    begin = getattr(sqlite, "begin_transaction", None)
    if begin is None or "with_for_update" not in inspect.signature(begin).parameters:
        raise PrefectCompatibilityError(
            "sqlite_writers_wait_their_turn", "AioSqliteConfiguration.begin_transaction(with_for_update=)"
        )

    @asynccontextmanager
    async def begin_immediate(self: Any, session: Any, with_for_update: bool = False) -> Any:
        async with begin(self, session, with_for_update=True) as transaction:
            yield transaction

    sqlite.begin_transaction = begin_immediate  # type: ignore[union-attr]


# --- uuid_columns_declare_their_operators (in the Prefect server's process) ---------------------


def uuid_columns_declare_their_operators() -> bool:
    """Give the UUID column type of Prefect's server the operators SQLAlchemy asks types to declare.

    SQLAlchemy 2.1 warns (deprecated) on every comparison with a type that declares none, and the
    warning first walks the whole call stack: about 30 us per ``column == id`` under the server's
    ASGI stack, about 3% of the server's CPU per action. ``ANY`` allows what an undeclared type
    allows today, without the warning. Returns False when there is nothing to do (an older
    SQLAlchemy without operator classes, or a Prefect that declares them itself).
    """
    try:
        from sqlalchemy.sql.operators import OperatorClass
    except ImportError:
        return False
    from prefect.server.utilities.database import UUID

    if UUID().operator_classes is not OperatorClass.UNSPECIFIED:
        return False
    UUID.operator_classes = OperatorClass.ANY  # type: ignore[misc,assignment]
    return True


# --- background_worker_polls_less (in the Prefect server's process) -----------------------------

BACKGROUND_WORKER_POLL_SECONDS: Final = 2.0
"""How often the local Prefect server's background worker looks for due work (Prefect: 0.25 s)."""


def background_worker_polls_less() -> None:
    """Make the Prefect server's background worker (docket) look for due work every 2 s, not 0.25 s.

    Its two loops ran eight times a second against the in-memory store whether or not anything was
    due: most of an idle Prefect server's CPU. What it runs here are Prefect's periodic services
    (every 15 s or more) and small follow-ups such as marking a work queue ready; none is worth a
    quarter of a second.
    """
    from datetime import timedelta

    from docket import Worker
    from prefect.server.api import background_workers

    wanted = {"minimum_check_interval", "scheduling_resolution"}
    if getattr(background_workers, "Worker", None) is not Worker or not wanted <= set(
        inspect.signature(Worker.__init__).parameters
    ):
        raise PrefectCompatibilityError(
            "background_worker_polls_less",
            "prefect.server.api.background_workers using docket.Worker(minimum_check_interval=, "
            "scheduling_resolution=)",
        )
    every = timedelta(seconds=BACKGROUND_WORKER_POLL_SECONDS)

    class PatientWorker(Worker):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("minimum_check_interval", every)
            kwargs.setdefault("scheduling_resolution", every)
            super().__init__(*args, **kwargs)

    background_workers.Worker = PatientWorker  # type: ignore[attr-defined]


# --- cancellation_listener_waits_longer (in the Prefect server's process) -----------------------

CANCELLATION_WAIT_SECONDS: Final = 2.0
"""How long one wait of the background worker's cancellation listener lasts (docket: 0.1 s)."""

_listening_until: ContextVar[asyncio.Event | None] = ContextVar("_listening_until", default=None)
"""In docket's cancellation listener task: the event that stops its worker."""


def cancellation_listener_waits_longer() -> None:
    """Let the background worker's cancellation listener wait 2 s for a message, not 0.1 s, in one
    thread hop.

    docket's listener asks its in-memory pub/sub for a message every 0.1 s, and the pub/sub waits in
    a worker thread in slices of 0.1 s: ten thread hops a second, 0.6% of a core of an idle local
    Prefect server. A docket task cancelled is now seen up to 2 s later (Prefect cancels only its
    own background services' tasks that way); the worker still stops at once, since the wait ends
    when the worker's stop is set. The message is then read as docket reads it, so none is lost.
    """
    import queue

    from burner_redis.pubsub import PubSub
    from docket import Worker

    listener = Worker._cancellation_listener
    source = inspect.getsource(listener)
    if (
        "get_message(" not in source
        or "timeout=0.1" not in source
        or "self._processing_session" not in source
        or not isinstance(PubSub(None)._queue, queue.Queue)
    ):
        raise PrefectCompatibilityError(
            "cancellation_listener_waits_longer",
            "docket.Worker._cancellation_listener polling burner_redis's PubSub.get_message(timeout=0.1), "
            "the pub/sub holding its messages in a queue.Queue",
        )
    get_message = PubSub.get_message

    async def listen(self: Any) -> None:
        session = self._processing_session
        _listening_until.set(session.stopping if session is not None else None)
        await listener(self)

    async def patient_get_message(
        self: Any, ignore_subscribe_messages: bool = False, timeout: float | None = 0.0
    ) -> Any:
        stopping = _listening_until.get()
        if stopping is not None and timeout is not None and 0 < timeout < CANCELLATION_WAIT_SECONDS:
            await _until_a_message(self._queue, stopping)
            timeout = 0.0  # what came is read, filtered and handled as docket's own read does
        return await get_message(self, ignore_subscribe_messages, timeout)

    Worker._cancellation_listener = listen  # type: ignore[method-assign]
    PubSub.get_message = patient_get_message


async def _until_a_message(messages: Any, stopping: asyncio.Event) -> None:
    """Wait until ``messages`` (a queue.Queue) holds one, ``stopping`` is set, or 2 s went by."""

    def wait() -> None:
        with messages.not_empty:
            if not messages.queue:
                messages.not_empty.wait(CANCELLATION_WAIT_SECONDS)

    waiting = asyncio.ensure_future(asyncio.to_thread(wait))
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not waiting.done():
            with messages.not_empty:  # the waiting thread returns now rather than at its timeout
                messages.not_empty.notify_all()
            await asyncio.gather(waiting, return_exceptions=True)


def prepare_the_local_server() -> None:
    """The patches the local Prefect server's own process applies before it starts."""
    sqlite_writers_wait_their_turn()
    uuid_columns_declare_their_operators()
    background_worker_polls_less()
    cancellation_listener_waits_longer()
