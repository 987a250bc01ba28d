"""The fork server: imports Prefect and Styrmin's action code once, then forks a process per action.

Started by the agent as ``python -m styrmin_backend.agent.prefect._process FD AGENT_PID``, where FD
is its control socket (see ``_protocol``). For each job request (which carries a socket of the
action's own) it forks a child that starts a session of its own, reads its job, runs the action as
a flow run and exits; the child's pages are the server's, copy-on-write, so it starts in about a
millisecond instead of the second a new Python takes to import Prefect. Each child serves a single
action, so whatever the action does to its process (``sys.exit``, a segfault, a leaked thread,
changed globals or ``os.environ``) ends with it and never reaches the agent, the fork server or
another action. The fork server runs no action code and opens no connection, so a child inherits
no client, thread or event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import io
import logging
import os
import random
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from styrmin_backend.agent.lifetime import die_with
from styrmin_backend.agent.prefect import _compat, _protocol
from styrmin_backend.domain.limits import REDACTED
from styrmin_backend.domain.secrets import is_secret_name
from styrmin_backend.memory import give_back_the_free_heap


class _Channel:
    """The action's socket, written from any of the threads a flow run logs from; safe to use from the threads a flow run logs from."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        data = _protocol.encode(kind, **fields)
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]


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
    # modules the cluster client's HTTP library loads when its first client is made, the emoji
    # table of Prefect's console log handler, and the regular expressions its highlighter compiles
    # (into `re`'s cache) for the first line it prints: a millisecond of each action's process.
    redact("warm-up", ["warm-up"])
    tls_context()
    import rich._emoji_codes  # noqa: F401
    from prefect.logging.highlighters import PrefectConsoleHighlighter
    from rich.text import Text

    PrefectConsoleHighlighter()(Text("Flow run 'warm-up' - Finished in state Completed() http://127.0.0.1/"))

    _make_a_cluster_client()
    _load_the_primitives_backend()

    def _warm(context: Any = None) -> None:
        """Never run: only its parameters are validated and serialised, to build pydantic's schemas."""

    # Set here, not written as an annotation: this module's annotations are strings that pydantic
    # would have to resolve in the function's globals.
    _warm.__annotations__ = {"context": GlobalContext | None, "return": None}
    warm = flow(_warm)
    warm.serialize_parameters(warm.validate_parameters({"context": None}))
    _compat.memoize_parameter_schemas()
    _compat.memoize_parameter_validation()
    _compat.read_default_result_storage_once()
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
    resources and their decoders, and the event-loop backend of the HTTP library's first request."""
    import anyio._backends._asyncio  # noqa: F401

    import styrmin._async_client
    import styrmin.models  # noqa: F401
    from styrmin_backend.actions._real import prepare_real_backend

    prepare_real_backend()


def _accepted(function: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters that ``function`` accepts: by name, or all of them when it takes ``**kwargs``."""
    signature = inspect.signature(function)
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in signature.parameters.values()):
        return dict(parameters)
    return {name: value for name, value in parameters.items() if name in signature.parameters}


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
            from styrmin_backend.actions.errors import action_error_text

            error = action_error_text(result)  # as Context.run of styrmin_backend.testing gives it
    return {"succeeded": False, "state": state.type.value, "error": error}


async def _run(job: dict[str, Any], channel: _Channel) -> None:
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    from styrmin_backend.actions._api import run_from_driver_folder
    from styrmin_backend.drivers.loading import ActionLoadError, load_action_flow

    _compat.start_reading_the_default_result_storage(
        _protocol.KnownResultStorage.decode(job.get("result_storage"))
    )
    try:
        action = load_action_flow(Path(job["driver_dir"]), job["location"])
        run_from_driver_folder(Path(job["driver_dir"]))
    except ActionLoadError as exc:
        channel.send(_protocol.END, succeeded=False, state=None, error=str(exc), load_error=True)
        return
    parameters = _accepted(action.fn, job["parameters"])
    flow_run = await _compat.create_flow_run_in_work_pool(
        get_client(),
        action,
        flow_id=(job.get("flow_ids") or {}).get(action.name),
        parameters=action.serialize_parameters(parameters),
        name=job.get("flow_run_name"),
        tags=list(job.get("tags") or []),
        work_pool=job.get("work_pool"),
        work_queue=job.get("work_queue"),
    )
    channel.send(
        _protocol.FLOW_RUN,
        id=str(flow_run.id),
        name=flow_run.name,
        flow_name=action.name,
        flow_id=str(flow_run.flow_id),
    )
    _compat.skip_the_engines_first_update(flow_run)
    _compat.flow_run_made_running(flow_run)
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


class _Prepared:
    """What the fork server makes once for every action: Prefect's settings and clients."""

    def __init__(self) -> None:
        from prefect.context import SettingsContext, get_settings_context

        self.settings = SettingsContext(
            profile=get_settings_context().profile, settings=_compat.action_settings()
        )
        with self.settings:
            self.sync_clients, self.async_clients = _compat.client_contexts()
        _compat.csrf_only_when_the_server_asks(
            str(self.settings.settings.api.url), self.sync_clients, self.async_clients
        )


_prepared: list[_Prepared] = []


async def _run_job(job: dict[str, Any], channel: _Channel) -> None:
    """Run the job's action as a flow run, in this (forked) process."""
    # The job's env (STYRMIN_TOKEN, STYRMIN_URL, ...) reaches the action only through this
    # process's environment: never through the flow run's parameters or logs.
    os.environ.update(job["env"])
    _redact_own_output(job["env"])
    _compat.send_logs_to(lambda log: channel.send(_protocol.LOG, log=log))
    prepared = _prepared[0] if _prepared else _Prepared()
    _compat.own_client_identities(prepared.sync_clients, prepared.async_clients)
    # The flow run's engine uses these clients instead of opening its own; entered here, their
    # connections are this process's own, never the fork server's.
    with prepared.settings, prepared.sync_clients:
        async with prepared.async_clients:
            await _run(job, channel)


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


def _read_job(fd: int) -> dict[str, Any]:
    """The job the agent wrote on this action's socket (it then shut its writing half)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return _protocol.decode(b"".join(chunks))


def _exit_code(exit: SystemExit) -> int:
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def _become_the_action(fd: int, server_pid: int, closing: list[Any]) -> None:
    """In the forked child: leave the fork server's session, then run the one job and exit. Never returns."""
    code = 1
    try:
        # Its own session and process group: a timeout or a cancel kills whatever the action started.
        os.setsid()
        for owned in closing:
            with contextlib.suppress(OSError):
                owned.close() if hasattr(owned, "close") else os.close(owned)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        die_with(server_pid)
        random.seed()  # flow run names come from `random`: each action's must differ from its siblings'
        job = _read_job(fd)
        channel = _Channel(fd)
        asyncio.run(_run_job(job, channel))
        code = 0
    except SystemExit as exit:
        code = _exit_code(exit)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _serve(control: socket.socket) -> int:
    """Fork a child per job request until the agent closes the control socket."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    children: dict[int, int] = {}
    """The pidfd of each running child: its pid."""
    control.sendall(_protocol.encode(_protocol.READY, pid=os.getpid(), threads=threading.active_count()))
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
                if not message:  # the agent closed its end: it runs no more actions
                    return 0
                request = _protocol.decode(message)
                (fd,) = fds
                pid = os.fork()
                if pid == 0:
                    _become_the_action(fd, os.getppid(), [selector, control, *children])
                os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                selector.register(pidfd, selectors.EVENT_READ)
                control.sendall(_protocol.encode(_protocol.FORKED, id=request["id"], pid=pid))
            else:
                pidfd = key.fd
                pid = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                returncode = os.waitstatus_to_exitcode(status)
                control.sendall(_protocol.encode(_protocol.EXITED, pid=pid, returncode=returncode))


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[1]))
    die_with(int(argv[2]))
    _warm_up()
    plain_console_unless_a_terminal()
    from styrmin_backend.actions._real import wire_real_backend

    wire_real_backend()  # the composition root of the primitives in every action's process
    _compat.complete_prefects_models()
    _compat.build_the_orchestration_result_model()
    _prepared.append(_Prepared())
    # What the warm-up made lives as long as the process and is shared, copy-on-write, with every
    # child: out of the children's collections (a full one walked it all, about 0.1 s, and wrote
    # to every page it touched).
    gc.collect()
    gc.freeze()
    give_back_the_free_heap()
    return _serve(control)


def plain_console_unless_a_terminal(loggers: Iterable[logging.Logger] | None = None) -> None:
    """Print the flow runs' log lines as plain text when no terminal reads them.

    Prefect's console handler renders each line through Rich (0.3 ms a line, more in a fresh child,
    against 0.01 ms), which only a terminal shows: its colours and highlights. Written to a pipe or a
    file (a service's log, a benchmark), the line is the same text either way, so there a plain
    handler with the same level, formatter and filters prints it instead (in ``loggers``; default:
    every logger of this process).
    """
    from prefect.logging.handlers import PrefectConsoleHandler

    if loggers is None:
        loggers = [
            logging.getLogger(),
            *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
        ]
    for logger in loggers:
        for index, handler in enumerate(logger.handlers):
            if not isinstance(handler, PrefectConsoleHandler) or _is_a_terminal(handler.stream):
                continue
            plain = logging.StreamHandler(handler.stream)
            plain.setLevel(handler.level)
            plain.setFormatter(handler.formatter)
            plain.filters = list(handler.filters)
            logger.handlers[index] = plain


def _is_a_terminal(stream: Any) -> bool:
    with contextlib.suppress(Exception):
        return bool(stream.isatty())
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
