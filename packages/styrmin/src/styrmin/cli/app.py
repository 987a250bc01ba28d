"""``styrminctl``: Styrmin from a terminal, with kubectl's habits."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from styrmin._environment import URL_ENV
from styrmin.cli import agents, backups, contexts, deployments, drivers, tasks, users
from styrmin.cli import revisions as revisions
from styrmin.cli import task_logs as task_logs
from styrmin.cli._common import (
    PLAIN_HELP,
    OutputOption,
    State,
    UsageProblem,
    fail,
    handle_errors,
    read_secret,
    set_state,
    state,
)
from styrmin.cli.apply import apply_command
from styrmin.cli.config import CONFIG_ENV, ConfigFileError, Context, context_name_for
from styrmin.cli.output import OutputFormat, emit, is_machine, make_console
from styrmin.cli.render import ROLE_LABELS, when
from styrmin.errors import AuthenticationError, ConfigurationError

HELP = """Deploy, upgrade, stop, start and inspect applications on Styrmin.

Log in once with `styrminctl login URL`; the server and token are kept in a context of the config file
(~/.config/styrmin/styrminctl.yaml, or $STYRMINCTL_CONFIG). STYRMIN_URL and STYRMIN_TOKEN override it.

Exit codes: 0 success; 1 a task failed, a driver is invalid or the server refused; 2 bad usage or the
server could not be reached.
"""

app = typer.Typer(
    name="styrminctl",
    help=HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=PLAIN_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(contexts.app, name="config")
app.add_typer(drivers.app, name="drivers")
app.add_typer(deployments.app, name="deployments")
app.add_typer(tasks.app, name="tasks")
app.add_typer(users.app, name="users")
app.add_typer(backups.app, name="backups")
app.add_typer(agents.app, name="agents")
app.command("apply")(apply_command)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"styrminctl {version('styrmin')}")
        except PackageNotFoundError:  # pragma: no cover
            print("styrminctl (version unknown)")
        raise typer.Exit()


@app.callback()
def main(
    server: Annotated[
        str | None,
        typer.Option(
            "--server", "-s", help=f"Styrmin's URL (default: the context's, or {URL_ENV}).", metavar="URL"
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            help="The context of the config file to use (default: the current context).",
            autocompletion=contexts.complete_context,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", help="API token to send (default: the context's, or STYRMIN_TOKEN)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar=CONFIG_ENV,
            help="The config file (default: ~/.config/styrmin/styrminctl.yaml).",
            show_envvar=True,
        ),
    ] = None,
    request_timeout: Annotated[
        float,
        typer.Option("--request-timeout", help="Seconds to wait for each answer of the server.", min=0.1),
    ] = 30.0,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    set_state(
        State(
            server=server, context=context, token=token, config_path=config, request_timeout=request_timeout
        )
    )


# --- login, logout, whoami ---------------------------------------------------------------------

LOGIN_TOKEN_NAME = "styrminctl"  # noqa: S105 - the name shown in the token list
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


_LIFETIME_SECONDS = (60, 10 * 365 * 86400)
"""The token lifetimes a login may ask for (the server's bounds): a minute to ten years."""


def _seconds(text: str) -> int:
    """``--expires-in``'s duration in seconds; raises UsageProblem naming the option."""
    match = _DURATION.match(text.strip())
    if not match:
        raise UsageProblem(
            f'--expires-in "{text}" is not a duration; write for example 3600, 90m, 12h or 30d.'
        )
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    shortest, longest = _LIFETIME_SECONDS
    if not shortest <= seconds <= longest:
        raise UsageProblem(f'--expires-in "{text}" is out of range; give from 60s (1m) to 3650d.')
    return seconds


@app.command()
@handle_errors
def login(
    server: Annotated[
        str | None,
        typer.Argument(help="The server's URL, for example https://styrmin.example.com.", show_default=False),
    ] = None,
    username: Annotated[str | None, typer.Option("--username", "-u", help="Your username.")] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from standard input.")
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(
            "--name", help="Name of the context to store (default: --context, or the server's host)."
        ),
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option("--expires-in", help="Token lifetime, for example 12h or 30d (default: the server's)."),
    ] = None,
) -> None:
    """Log in and keep the server and a new API token as the current context (file mode 0600)."""
    from styrmin import Client
    from styrmin._http import resolve_url

    lifetime = _seconds(expires_in) if expires_in else None  # before any question is asked
    st = state()
    config = st.config()
    named = config.contexts.get(name or st.context or "")
    current = config.current
    chosen = server or st.server or (named.server if named else None) or os.environ.get(URL_ENV) or None
    chosen = chosen or (current.server if current else None)
    if not chosen:
        raise UsageProblem("Give the server's URL: styrminctl login https://styrmin.example.com")
    try:
        url = resolve_url(chosen)
    except ConfigurationError as error:
        raise UsageProblem(error.message) from None
    # A login again to the current context's server (after logout, or once its token expired) fills
    # that context again rather than making another one beside it.
    again = current.name if current is not None and current.server == url else None
    context_name = name or st.context or again or context_name_for(url)
    previous = config.contexts.get(context_name)
    if username is None:
        default = previous.user if previous else None
        username = str(typer.prompt("Username", default=default) if default else typer.prompt("Username"))
    password = read_secret("Password", password_stdin)
    with Client(url, "", timeout=st.request_timeout) as client:
        try:
            issued = client.login(
                username, password, token_name=LOGIN_TOKEN_NAME, expires_in_seconds=lifetime
            )
        except AuthenticationError as error:  # not "log in again": this is the login
            fail(error.message)
    config.contexts[context_name] = Context(
        name=context_name,
        server=url,
        user=username,
        token=issued.token,
        token_expires_at=issued.expires_at.isoformat(),
    )
    config.current_context = context_name
    try:
        config.save()
    except ConfigFileError as error:
        raise UsageProblem(str(error)) from None
    make_console().print(
        Text(
            f"Logged in to {url} as {username}. "
            f'Context "{context_name}" is current; its token expires {when(issued.expires_at)}.'
        ),
        soft_wrap=True,
    )


@app.command()
@handle_errors
def logout() -> None:
    """Revoke the current context's token on the server and forget it (the context keeps its server)."""
    from styrmin import Client

    st = state()
    server, token, context = st.target()
    if not token:
        raise UsageProblem(f"Not logged in to {server}; there is no token to revoke.")
    note = "its token is revoked"
    with Client(server, token, timeout=st.request_timeout) as client:
        try:
            client.logout()
        except AuthenticationError:
            note = "its token was already expired or revoked"
    if context is not None and context.token == token:
        context.token = None
        context.token_expires_at = None
        st.config().save()
    make_console().print(Text(f"Logged out of {server}: {note}."), soft_wrap=True)


@app.command()
@handle_errors
def whoami(output: OutputOption = OutputFormat.TEXT) -> None:
    """Who the token belongs to, and its role."""
    st = state()
    with st.client() as client:
        me = client.whoami()
    if is_machine(output):
        emit(me, output)
        return
    server, _, context = st.target()
    where = f' (context "{context.name}")' if context else ""
    line = f"{me.username} ({ROLE_LABELS.get(me.role.value, me.role.value)}) at {server}{where}"
    if me.builtin:
        line += "; a built-in user"
    make_console().print(Text(line), soft_wrap=True)


__all__ = ["app"]
