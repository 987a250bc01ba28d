"""What every styrminctl command shares: global options, the client, errors and exit codes."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, ParamSpec, TypeVar

import typer
from rich.text import Text

from styrmin._environment import TOKEN_ENV, URL_ENV
from styrmin._http import RETRY_SECONDS_ENV
from styrmin.cli.config import Config, ConfigFileError, Context, load, same_server
from styrmin.cli.output import GetFormat, ListFormat, OutputFormat, dump, is_machine, make_console
from styrmin.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    ForbiddenError,
    InvalidDriverError,
    NotFoundError,
    PayloadTooLargeError,
    ServerError,
    StyrminConnectionError,
    StyrminError,
    TaskFailedError,
    ValidationError,
    WaitTimeoutError,
)

if TYPE_CHECKING:
    from styrmin import Client

P = ParamSpec("P")
R = TypeVar("R")

PLAIN_HELP = None
"""Help as plain text (click's), not Rich panels: Rich's Markdown and Pygments would triple the start."""

EXIT_OK = 0
EXIT_FAILED = 1
"""A task failed, a driver is invalid, or the server refused the request."""
EXIT_USAGE = 2
"""Bad usage (options, config) or the server could not be reached."""
EXIT_INTERRUPTED = 130
"""Interrupted with Ctrl-C (also at a question or a password prompt)."""


class UsageProblem(Exception):
    """The command cannot run as asked (exit code 2); the message says what to do."""


@dataclass
class State:
    """The global options of one styrminctl run, and what they resolve to."""

    server: str | None = None
    context: str | None = None
    token: str | None = None
    config_path: Path | None = None
    request_timeout: float = 30.0
    _config: Config | None = field(default=None, repr=False)

    def config(self) -> Config:
        if self._config is None:
            try:
                self._config = load(self.config_path)
            except ConfigFileError as error:
                raise UsageProblem(str(error)) from None
            if self._config.loose_permissions:
                make_console(stderr=True).print(
                    Text(
                        f"warning: {self._config.path} can be read by other users and holds tokens; "
                        f"run: chmod 600 {self._config.path}",
                        style="yellow",
                    )
                )
        return self._config

    def chosen_context(self) -> tuple[Context | None, bool]:
        """The context to use and whether --context named it (else it is the current context)."""
        config = self.config()
        if self.context:
            found = config.contexts.get(self.context)
            if found is None:
                raise UsageProblem(
                    f'There is no context "{self.context}" in {config.path}; '
                    "list them with: styrminctl config get-contexts"
                )
            return found, True
        return config.current, False

    def target(self) -> tuple[str, str | None, Context | None]:
        """The server URL and token to call, and the context they came from.

        The server: --server, else the context --context names, else STYRMIN_URL, else the current
        context. The token: --token, else that of a context --context names, else STYRMIN_TOKEN, else
        the current context's. A context's token is sent only to the context's own server.
        """
        context, explicit = self.chosen_context()
        env_url = os.environ.get(URL_ENV) or None
        server = self.server or (context.server if explicit and context else None) or env_url
        server = server or (context.server if context else None)
        if not server:
            raise UsageProblem(
                f"No Styrmin server: log in with `styrminctl login URL`, set {URL_ENV}, or pass --server URL."
            )
        own = context is not None and same_server(context.server, server)
        token = self.token
        if token is None and explicit and own and context is not None:
            token = context.token
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        if token is None and own and context is not None:
            token = context.token
        return server, token, context if own else None

    def client(self) -> Client:
        """A client of the chosen server with the chosen token."""
        from styrmin import Client

        server, token, _ = self.target()
        retry_seconds = None if os.environ.get(RETRY_SECONDS_ENV, "").strip() else CLI_RETRY_SECONDS
        try:
            return Client(server, token or "", timeout=self.request_timeout, retry_seconds=retry_seconds)
        except ConfigurationError as error:
            raise UsageProblem(error.message) from None


CLI_RETRY_SECONDS = 15.0
"""How long styrminctl's reads and idempotent writes wait for a server that is away, unless
STYRMIN_RETRY_SECONDS says otherwise: the SDK's 90 s suit a script riding through a restart, but a
person at a terminal with a mistyped URL should hear of it soon."""

_current = State()


def set_state(new: State) -> None:
    """Make ``new`` the state of the running command (the root callback does, once per run)."""
    global _current
    _current = new


def state() -> State:
    """The state of the running command: its global options."""
    return _current


ERROR_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (UsageProblem, "usage"),
    (StyrminConnectionError, "unreachable"),
    (ConfigurationError, "configuration"),
    (AuthenticationError, "unauthenticated"),
    (ForbiddenError, "forbidden"),
    (NotFoundError, "not_found"),
    (ConflictError, "conflict"),
    (ValidationError, "invalid"),
    (BadRequestError, "invalid"),
    (PayloadTooLargeError, "too_large"),
    (ServerError, "server_error"),
    (APIError, "refused"),
    (InvalidDriverError, "invalid_driver"),
    (TaskFailedError, "task_failed"),
    (WaitTimeoutError, "timeout"),
    (StyrminError, "error"),
)
"""The ``code`` of a machine-readable error (``-o json|yaml``), by the error's class: stable, so
scripts may branch on it (docs/cli.md lists them)."""


def error_code(error: BaseException) -> str:
    """The stable code of ``error`` (the first class of :data:`ERROR_CODES` it is)."""
    return next((code for kind, code in ERROR_CODES if isinstance(error, kind)), "error")


def _fail_as(
    fmt: OutputFormat | ListFormat | GetFormat,
    error: BaseException,
    message: str,
    exit_code: int,
    detail: list[str],
) -> NoReturn:
    """The error as one JSON or YAML document on stdout (nothing else is printed there), then exit."""
    body: dict[str, object] = {"code": error_code(error), "message": message, "exit_code": exit_code}
    if detail:
        body["details"] = detail
    status = getattr(error, "status", None)
    if isinstance(status, int):
        body["status"] = status
    sys.stdout.write(dump({"error": body}, fmt))
    sys.stdout.flush()
    raise typer.Exit(exit_code)


def fail(message: str, code: int = EXIT_FAILED, detail: list[str] | None = None) -> NoReturn:
    """Print ``error: message`` (and detail lines) on stderr and exit with ``code``."""
    err = make_console(stderr=True)
    err.print(Text("error: ", style="bold red") + Text(message))
    for line in detail or []:
        err.print(Text(f"  {line}"))
    raise typer.Exit(code)


def _api_detail(error: APIError) -> list[str]:
    detail = [str(e) for e in error.errors if str(e) and str(e) not in error.message]
    if len(error.errors) > 1:
        detail = [str(e) for e in error.errors]
    if isinstance(error, AuthenticationError):
        detail.append("Log in again with: styrminctl login")
    return detail


def _explained(error: Exception) -> tuple[str, int, list[str]]:
    """The message, exit code and detail lines of an error a command let through."""
    if isinstance(error, UsageProblem):
        return str(error), EXIT_USAGE, []
    if isinstance(error, StyrminConnectionError | ConfigurationError):
        return error.message, EXIT_USAGE, []
    if isinstance(error, APIError):
        return error.message, EXIT_FAILED, _api_detail(error)
    if isinstance(error, InvalidDriverError):
        return error.message, EXIT_FAILED, [str(e) for e in error.errors if str(e) not in error.message]
    assert isinstance(error, StyrminError)
    return error.message, EXIT_FAILED, []


def handle_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Turn the SDK's exceptions into a message on stderr and the documented exit code; under
    ``-o json|yaml``, into a document with a stable ``code`` on stdout instead. Ctrl-C (also at a
    question or a password prompt) exits 130."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        def report(error: BaseException, message: str, exit_code: int, detail: list[str]) -> NoReturn:
            fmt = kwargs.get("output")
            if isinstance(fmt, OutputFormat | ListFormat | GetFormat) and is_machine(fmt):
                _fail_as(fmt, error, message, exit_code, detail)
            fail(message, exit_code, detail)

        try:
            return function(*args, **kwargs)
        except (UsageProblem, StyrminError) as error:
            report(error, *_explained(error))
        except typer.Abort as aborted:
            if isinstance(aborted.__context__, EOFError):  # standard input ended at a prompt: no answer
                ended = StyrminError("Standard input ended before an answer; nothing was changed.")
                report(ended, ended.message, EXIT_FAILED, [])
            make_console(stderr=True).print("Interrupted.")  # Ctrl-C at a prompt, which raises Abort
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except KeyboardInterrupt:
            make_console(stderr=True).print("Interrupted.")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def stdin_is_terminal() -> bool:
    """Whether someone can answer a question on standard input."""
    return sys.stdin.isatty()


def confirm(action: str, yes: bool) -> None:
    """Ask before ``action`` (a destructive change) unless ``yes``; with no terminal to ask on, refuse.

    Raises:
        UsageProblem: standard input is not a terminal and ``--yes`` was not given.
    """
    if yes:
        return
    if not stdin_is_terminal():
        raise UsageProblem(
            f"Refusing to {action} without confirmation: standard input is not a terminal. "
            "Add --yes to do it anyway."
        )
    if not typer.confirm(f"{action[0].upper()}{action[1:]}?", default=False):
        make_console(stderr=True).print("Nothing was changed.")
        raise typer.Exit(EXIT_FAILED)


def _completion_client(ctx: typer.Context) -> Client | None:
    """A client for shell completion: the server and token the command being completed would use
    (its global options, which the root callback does not see during completion), a short timeout, and
    None when there is none (completion then offers nothing, silently)."""
    given = ctx.find_root().params
    try:
        return State(
            server=given.get("server"),
            context=given.get("context"),
            token=given.get("token"),
            config_path=given.get("config"),
            request_timeout=3.0,
        ).client()
    except Exception:  # completion must never print an error into the user's shell
        return None


def complete_deployment(ctx: typer.Context, incomplete: str) -> list[str]:
    """The names of the deployments starting with ``incomplete`` (shell completion)."""
    client = _completion_client(ctx)
    if client is None:
        return []
    try:
        with client:
            return [d.name for d in client.deployments.list() if d.name.startswith(incomplete)]
    except Exception:
        return []


def complete_task(ctx: typer.Context, incomplete: str) -> list[str]:
    """The ids of the latest tasks starting with ``incomplete`` (shell completion)."""
    client = _completion_client(ctx)
    if client is None:
        return []
    try:
        with client:
            ids = [str(t.id) for t in client.tasks.list(limit=50).items]
    except Exception:
        return []
    return [task_id for task_id in ids if task_id.startswith(incomplete)]


YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Do it without asking (needed when stdin is not a terminal).")
]
GetOutputOption = Annotated[
    GetFormat,
    typer.Option(
        "--output",
        "-o",
        help="Print as text (for people), name (KIND/NAME, as kubectl), json or yaml (the API's fields).",
        case_sensitive=False,
    ),
]
ListOutputOption = Annotated[
    ListFormat,
    typer.Option(
        "--output",
        "-o",
        help="Print as a table (text), a wider table (wide), KIND/NAME lines (name), json or yaml.",
        case_sensitive=False,
    ),
]
OutputOption = Annotated[
    OutputFormat,
    typer.Option(
        "--output",
        "-o",
        help="Print as text (for people), json or yaml (the API's fields; see docs/cli.md).",
        case_sensitive=False,
    ),
]
WaitOption = Annotated[
    bool, typer.Option("--wait", "-w", help="Show the task's steps live until it ends; exit 1 if it failed.")
]
WaitTimeoutOption = Annotated[
    float | None,
    typer.Option("--timeout", help="Stop waiting after this many seconds (exit 1); the task goes on.", min=0),
]


def poll_interval() -> float:
    """Seconds between two reads of a task while waiting (STYRMINCTL_POLL_INTERVAL, default 1)."""
    try:
        return max(0.05, float(os.environ.get("STYRMINCTL_POLL_INTERVAL", "1")))
    except ValueError:
        return 1.0


def read_secret(prompt: str, from_stdin: bool, confirm: bool = False) -> str:
    """A password from standard input (one line) or typed at a hidden prompt."""
    if from_stdin:
        secret = sys.stdin.readline().rstrip("\r\n")
    else:
        secret = str(typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm))
    if not secret:
        raise UsageProblem("The password is empty.")
    return secret
