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
from styrmin.cli.config import Config, ConfigFileError, Context, load, same_server
from styrmin.cli.output import OutputFormat, make_console
from styrmin.errors import (
    APIError,
    AuthenticationError,
    ConfigurationError,
    InvalidDriverError,
    StyrminConnectionError,
    StyrminError,
    TaskFailedError,
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
        try:
            return Client(server, token or "", timeout=self.request_timeout)
        except ConfigurationError as error:
            raise UsageProblem(error.message) from None


_current = State()


def set_state(new: State) -> None:
    """Make ``new`` the state of the running command (the root callback does, once per run)."""
    global _current
    _current = new


def state() -> State:
    """The state of the running command: its global options."""
    return _current


def fail(message: str, code: int = EXIT_FAILED, detail: list[str] | None = None) -> NoReturn:
    """Print ``error: message`` (and detail lines) on stderr and exit with ``code``."""
    err = make_console(stderr=True)
    err.print(Text("error: ", style="bold red") + Text(message))
    for line in detail or []:
        err.print(Text(f"  {line}"))
    raise typer.Exit(code)


def _api_error(error: APIError) -> NoReturn:
    detail = [str(e) for e in error.errors if str(e) and str(e) not in error.message]
    if len(error.errors) > 1:
        detail = [str(e) for e in error.errors]
    if isinstance(error, AuthenticationError):
        detail.append("Log in again with: styrminctl login")
    fail(error.message, EXIT_FAILED, detail)


def handle_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Turn the SDK's exceptions into a message on stderr and the documented exit code."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except UsageProblem as error:
            fail(str(error), EXIT_USAGE)
        except StyrminConnectionError as error:
            fail(error.message, EXIT_USAGE)
        except ConfigurationError as error:
            fail(error.message, EXIT_USAGE)
        except APIError as error:
            _api_error(error)
        except InvalidDriverError as error:
            fail(error.message, EXIT_FAILED, [str(e) for e in error.errors][1:])
        except (TaskFailedError, WaitTimeoutError) as error:
            fail(error.message, EXIT_FAILED)
        except StyrminError as error:
            fail(error.message, EXIT_FAILED)
        except KeyboardInterrupt:
            make_console(stderr=True).print("Interrupted.")
            raise typer.Exit(130) from None

    return wrapper


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
