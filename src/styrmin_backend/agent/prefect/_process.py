"""A runner process: imports Prefect ahead of time, then runs ONE action as a flow run and exits.

Started by the agent's pool as ``python -m styrmin_backend.agent.prefect._process FD AGENT_PID``,
where FD is the pipe it writes its messages to (see ``_protocol``). Each process serves a single action, so
whatever the action does to its process (``sys.exit``, a segfault, a leaked thread, changed globals)
ends with it and never reaches the agent or another action.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import inspect
import io
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from styrmin_backend.agent.prefect import _protocol
from styrmin_backend.domain.limits import REDACTED
from styrmin_backend.domain.secrets import is_secret_name


class _Channel:
    """The write end of the message pipe, safe to use from the threads a flow run logs from."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        data = _protocol.encode(kind, **fields)
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]


def _die_with_the_agent(agent_pid: int) -> None:
    """Ask Linux to kill this process when the agent dies, so no action outlives the agent that ran it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the agent's process group kill still applies
        pass
    if os.getppid() != agent_pid:  # the agent died before prctl took effect
        os._exit(1)


def _warm_up() -> None:
    """Import and exercise, before any job arrives, what a flow run would otherwise load lazily."""
    import fastapi.encoders  # noqa: F401  (imported by Flow.serialize_parameters on first use)
    import prefect.flow_engine  # noqa: F401
    from prefect import flow

    from styrmin_backend.actions import GlobalContext  # what every action imports
    from styrmin_backend.actions._api import tls_context
    from styrmin_backend.domain.redaction import redact

    # Loaded on first use otherwise, during an action: detect-secrets' plugins (the redaction of a
    # command's output; about 0.3 s, seconds on a busy machine), the SDK clients' CA bundle, the
    # modules the cluster client's HTTP library loads when its first client is made, and the emoji
    # table of Prefect's console log handler.
    redact("warm-up", ["warm-up"])
    tls_context()
    import rich._emoji_codes  # noqa: F401

    _make_a_cluster_client()
    _load_the_primitives_backend()

    def _warm(context: Any = None) -> None:
        """Never run: only its parameters are validated and serialised, to build pydantic's schemas."""

    # Set here, not written as an annotation: this module's annotations are strings that pydantic
    # would have to resolve in the function's globals.
    _warm.__annotations__ = {"context": GlobalContext | None, "return": None}
    warm = flow(_warm)
    warm.serialize_parameters(warm.validate_parameters({"context": None}))
    _memoize_parameter_schemas()
    _read_the_default_result_storage_once()
    # The signatures actions have (the seed's among them): their flows' schemas are then ready.
    for parameters in ({"context": GlobalContext}, {"context": GlobalContext, "target_version": str}):
        _warm.__annotations__ = {**parameters, "return": None}
        _warm.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation)
                for name, annotation in parameters.items()
            ]
        )
        flow(_warm)


def _memoize_parameter_schemas() -> None:
    """Make Prefect compute each flow parameters' JSON schema once per signature in this process.

    Prefect computes it for every ``@flow`` as the driver's module is imported (the schema of a
    ``GlobalContext`` parameter takes ~25 ms, more on a busy machine), although a flow run never uses
    it; an ``actions.py`` holds several flows with the same parameters. Done once for the usual
    signatures before the job arrives, the action's module imports without it. The schema depends
    only on the parameters (name, kind, default, annotation) and their docstrings: the key.
    """
    import prefect.flows
    from prefect.utilities.callables import generate_parameter_schema, parameter_docstrings

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


class _DefaultResultStorage:
    """The Prefect server's default result storage, read once per flow run instead of twice.

    Prefect's engine asks the server for it while starting a flow run, once to decide whether
    results persist (async) and once for the result store (sync): two calls in a row, with the same
    answer. This process runs one flow run, so the first answer holds for the rest of it. The read
    starts as the job arrives, beside the flow run's first calls to the server.
    """

    def __init__(self, read_async: Any, read_sync: Any) -> None:
        self._read_async = read_async
        self._read_sync = read_sync
        self._answer: list[Any] = []
        self._reading: asyncio.Future[Any] | None = None

    def start_reading(self) -> None:
        if self._reading is None and not self._answer:
            self._reading = asyncio.ensure_future(self._read_async())

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
"""This process's one ``_DefaultResultStorage``, once ``_read_the_default_result_storage_once`` made it."""


def _read_the_default_result_storage_once() -> None:
    """Make the flow run read the Prefect server's default result storage once (``_DefaultResultStorage``)."""
    import prefect.results

    names = ("_aread_server_default_result_storage_block_id", "_read_server_default_result_storage_block_id")
    read_async, read_sync = (getattr(prefect.results, name, None) for name in names)
    if read_async is None or read_sync is None:  # another Prefect version: it reads as it does
        return
    storage = _DefaultResultStorage(read_async, read_sync)
    _default_result_storage.append(storage)
    setattr(prefect.results, names[0], storage.first_answer_async)
    setattr(prefect.results, names[1], storage.first_answer_sync)


def _make_a_cluster_client() -> None:
    """Make, and drop, a cluster client of a placeholder cluster: the first one made loads its HTTP
    library's transport modules (about 1 s on a busy machine). Nothing is sent."""
    import contextlib
    import importlib

    from lightkube import AsyncClient, KubeConfig

    placeholder = {
        "clusters": [{"name": "warm-up", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "warm-up", "user": {"token": "warm-up"}}],
        "contexts": [{"name": "warm-up", "context": {"cluster": "warm-up", "user": "warm-up"}}],
        "current-context": "warm-up",
    }
    AsyncClient(KubeConfig.from_dict(placeholder))
    for module in ("trio", "socksio"):  # loaded by the first request otherwise, when installed
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def _load_the_primitives_backend() -> None:
    """Import what the first primitive an action calls loads otherwise (about 0.2 s on a busy machine):
    the backend over the Styrmin SDK and lightkube, the SDK's client and models, the workload and Job
    resources, and the event-loop backend of the HTTP library's first request."""
    import anyio._backends._asyncio  # noqa: F401

    import styrmin._async_client
    import styrmin.models  # noqa: F401
    import styrmin_backend.actions._real  # noqa: F401


def _accepted(function: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters that ``function`` accepts: by name, or all of them when it takes ``**kwargs``."""
    signature = inspect.signature(function)
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in signature.parameters.values()):
        return dict(parameters)
    return {name: value for name, value in parameters.items() if name in signature.parameters}


async def _create_flow_run(action: Any, parameters: dict[str, Any], job: dict[str, Any]) -> Any:
    """The action's flow run, Pending, made on the Prefect server.

    ``create_flow_run`` asks the server for the flow's id (creating the flow the first time), then
    makes the flow run. When the agent knows the flow's id from an earlier run (``flow_ids``), the
    flow run is made with it at once, as ``create_flow_run`` would make it; a server that no longer
    has that flow refuses it, and the flow run is made the usual way.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import FlowRunCreate
    from prefect.client.schemas.objects import FlowRun, FlowRunPolicy
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.states import Pending, to_state_create

    client = get_client()
    name, tags = job.get("flow_run_name"), job.get("tags") or []
    serialized = action.serialize_parameters(parameters)
    flow_id = (job.get("flow_ids") or {}).get(action.name)
    if flow_id is not None:
        create = FlowRunCreate(
            flow_id=flow_id,
            flow_version=action.version,
            name=name,
            parameters=serialized,
            context={},
            tags=list(tags),
            parent_task_run_id=None,
            state=to_state_create(Pending()),
            empirical_policy=FlowRunPolicy(
                retries=action.retries, retry_delay=int(action.retry_delay_seconds or 0)
            ),
        )
        try:
            response = await client.request(
                "POST", "/flow_runs/", json=create.model_dump(mode="json", exclude_unset=True)
            )
        except PrefectHTTPStatusError:  # the flow is gone (its server's database was reset)
            pass
        else:
            flow_run = FlowRun.model_validate(response.json())
            flow_run.parameters = serialized
            return flow_run
    return await client.create_flow_run(action, name=name, parameters=serialized, tags=tags, state=Pending())


def _skip_the_engines_first_update(created: Any) -> None:
    """Spare the flow run's engine its first call, which changes nothing on a flow run made here.

    Given a flow run, Prefect's engine first sends the flow's version and retry policy to it
    (``update_flow_run``); ``create_flow_run`` created it with both, from the same flow. That call
    is answered here, unsent, when it carries exactly what the flow run was created with; any
    other update is sent.
    """
    from prefect.client.orchestration import PrefectClient, SyncPrefectClient

    version, policy = created.flow_version, created.empirical_policy.model_copy()

    def unchanged(flow_run_id: Any, args: tuple[Any, ...], changes: dict[str, Any]) -> bool:
        return (
            flow_run_id == created.id
            and not args
            and set(changes) == {"flow_version", "empirical_policy"}
            and changes["flow_version"] == version
            and changes["empirical_policy"] == policy
        )

    update_async, update_sync = PrefectClient.update_flow_run, SyncPrefectClient.update_flow_run

    async def update_unless_unchanged_async(self: Any, flow_run_id: Any, *args: Any, **changes: Any) -> Any:
        if unchanged(flow_run_id, args, changes):
            return None  # the engine does not use the answer
        return await update_async(self, flow_run_id, *args, **changes)

    def update_unless_unchanged_sync(self: Any, flow_run_id: Any, *args: Any, **changes: Any) -> Any:
        if unchanged(flow_run_id, args, changes):
            return None
        return update_sync(self, flow_run_id, *args, **changes)

    PrefectClient.update_flow_run = update_unless_unchanged_async  # type: ignore[method-assign]
    SyncPrefectClient.update_flow_run = update_unless_unchanged_sync  # type: ignore[method-assign]


async def _end_message(state: Any) -> dict[str, Any]:
    """The ``end`` message for the flow run's final state."""
    if state.is_completed():
        return {"succeeded": True, "state": state.type.value}
    error = state.message or f"The flow run ended {state.name}."
    if state.is_failed():
        result = state.result(raise_on_failure=False)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BaseException):
            error = str(result) or type(result).__name__
    return {"succeeded": False, "state": state.type.value, "error": error}


async def _run(job: dict[str, Any], channel: _Channel) -> None:
    from prefect.flow_engine import run_flow

    from styrmin_backend.drivers.loading import ActionLoadError, load_action_flow

    for storage in _default_result_storage:
        storage.start_reading()
    try:
        action = load_action_flow(Path(job["driver_dir"]), job["location"])
    except ActionLoadError as exc:
        channel.send(_protocol.END, succeeded=False, state=None, error=str(exc), load_error=True)
        return
    parameters = _accepted(action.fn, job["parameters"])
    flow_run = await _create_flow_run(action, parameters, job)
    channel.send(
        _protocol.FLOW_RUN,
        id=str(flow_run.id),
        name=flow_run.name,
        flow_name=action.name,
        flow_id=str(flow_run.flow_id),
    )
    _skip_the_engines_first_update(flow_run)
    state: Any
    if action.isasync:
        state = run_flow(action, flow_run=flow_run, parameters=parameters, return_type="state")
        state = await state
    else:
        # In a thread, which gets a copy of this task's context and so the clients opened in main.
        state = await asyncio.to_thread(
            run_flow, action, flow_run=flow_run, parameters=parameters, return_type="state"
        )
    channel.send(_protocol.END, **await _end_message(state))


async def _fetch_csrf_tokens() -> None:
    """Make each client fetch its CSRF token now (~0.1 s on a busy server) rather than during the run.

    A client fetches it before its first change request (POST, PATCH, ...), or learns the server does
    not use one; filtering flows is such a request, and changes nothing.
    """
    from prefect.client.orchestration import get_client

    await get_client().request("POST", "/flows/filter", json={"limit": 1})
    get_client(sync_client=True).request("POST", "/flows/filter", json={"limit": 1})


async def _main(channel: _Channel) -> int:
    from prefect.context import AsyncClientContext, SettingsContext, SyncClientContext, get_settings_context
    from prefect.logging.handlers import set_api_log_sink

    _warm_up()
    from styrmin_backend.actions._real import wire_real_backend

    wire_real_backend()  # the composition root of the primitives in an action's process
    # Heartbeats would only tell the server that this process is alive, which the agent watches
    # itself; and the sync engine's heartbeat thread costs ~1 s at the end of every run.
    settings_context = get_settings_context()
    settings = settings_context.settings.copy_with_update(updates={"flows.heartbeat_frequency": None})
    # The flow run's engine uses these clients instead of opening its own: a new client costs ~40 ms
    # (its SSL context loads the CA bundle) and an API version check.
    with (
        SettingsContext(profile=settings_context.profile, settings=settings),
        SyncClientContext.get_or_create(),
    ):
        async with AsyncClientContext.get_or_create():
            await _fetch_csrf_tokens()
            # What the warm-up made lives as long as the process: out of the action's collections
            # (a full one walked it all, about 0.1 s, in the middle of a flow run).
            gc.collect()
            gc.freeze()
            channel.send(_protocol.READY, pid=os.getpid())
            line = await asyncio.to_thread(sys.stdin.buffer.readline)
            if not line:  # the pool closed without using this process
                return 0
            job = _protocol.decode(line)
            # The job's env (STYRMIN_TOKEN, STYRMIN_URL, ...) reaches the action only through this
            # process's environment: never through the flow run's parameters or logs.
            os.environ.update(job["env"])
            _redact_own_output(job["env"])
            # The agent sends each log record to the Prefect server: it still has them if this
            # process is killed, so a crashed run's logs are complete when it reads them.
            set_api_log_sink(lambda log: channel.send(_protocol.LOG, log=log))
            await _run(job, channel)
    return 0


class _RedactingStream(io.TextIOBase):
    """A text stream that writes to ``target`` with the action's token replaced by <redacted>."""

    def __init__(self, target: Any, secrets: list[str]) -> None:
        self._target = target
        self._secrets = secrets

    def write(self, text: str) -> int:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return int(self._target.write(text))

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return bool(self._target.isatty())


def _redact_own_output(env: dict[str, str]) -> None:
    """Keep the action's token out of what this process prints (the agent's own output)."""
    secrets = [value for name, value in env.items() if value and is_secret_name(name)]
    if not secrets:
        return
    sys.stdout = _RedactingStream(sys.stdout, secrets)
    sys.stderr = _RedactingStream(sys.stderr, secrets)
    loggers = [
        logging.getLogger(),
        *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
    ]
    for handler in {handler for lg in loggers for handler in lg.handlers}:
        stream = getattr(handler, "stream", None)
        if stream in (sys.__stdout__, sys.__stderr__):
            handler.stream = _RedactingStream(stream, secrets)  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    channel = _Channel(int(argv[1]))
    _die_with_the_agent(int(argv[2]))
    return asyncio.run(_main(channel))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
