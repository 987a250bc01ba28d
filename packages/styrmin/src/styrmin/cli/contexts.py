"""``styrminctl config``: the contexts of the config file (tokens are never printed)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from styrmin.cli._common import PLAIN_HELP, OutputOption, UsageProblem, handle_errors, state
from styrmin.cli.config import ConfigFileError, Context, load
from styrmin.cli.output import OutputFormat, emit, is_machine, make_console
from styrmin.cli.render import clean, when

app = typer.Typer(
    rich_markup_mode=PLAIN_HELP,
    help="Contexts: which server and token styrminctl uses.",
    no_args_is_help=True,
)


def complete_context(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of context names from the config file (``--config``'s, when given)."""
    try:
        names = list(load(ctx.find_root().params.get("config")).contexts)
    except ConfigFileError:
        return []
    return [name for name in names if name.startswith(incomplete)]


ContextArgument = Annotated[
    str, typer.Argument(help="The context's name.", autocompletion=complete_context, show_default=False)
]


def _described(context: Context, current: bool) -> dict[str, Any]:
    return {
        "name": context.name,
        "current": current,
        "server": context.server,
        "user": context.user,
        "logged_in": context.token is not None,
        "token_expires_at": context.token_expires_at,
    }


@app.command("get-contexts")
@handle_errors
def get_contexts(output: OutputOption = OutputFormat.TEXT) -> None:
    """List the contexts; the current one is marked with *."""
    config = state().config()
    rows = [_described(c, c.name == config.current_context) for c in config.contexts.values()]
    if is_machine(output):
        emit(rows, output)
        return
    if not rows:
        make_console().print(
            f"No contexts in {config.path}; log in with: styrminctl login URL", soft_wrap=True
        )
        return
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("CURRENT", "NAME", "SERVER", "USER", "TOKEN"):
        table.add_column(column)
    for row in rows:
        token = _token_state(row["token_expires_at"]) if row["logged_in"] else "none (log in)"
        table.add_row(
            "*" if row["current"] else "",
            clean(row["name"]),
            clean(row["server"]),
            clean(row["user"] or "-"),
            token,
        )
    make_console().print(table)


@app.command("current-context")
@handle_errors
def current_context() -> None:
    """Print the current context's name."""
    config = state().config()
    if not config.current_context:
        raise UsageProblem(f"No current context in {config.path}; log in with: styrminctl login URL")
    make_console().print(Text(config.current_context), soft_wrap=True)


@app.command("use-context")
@handle_errors
def use_context(name: ContextArgument) -> None:
    """Make a context the current one."""
    config = state().config()
    if name not in config.contexts:
        known = ", ".join(config.contexts) or "none"
        raise UsageProblem(f'There is no context "{name}" in {config.path} (there are: {known}).')
    config.current_context = name
    _save(config)
    make_console().print(
        Text(f'Switched to context "{name}" ({config.contexts[name].server}).'), soft_wrap=True
    )


@app.command("delete-context")
@handle_errors
def delete_context(name: ContextArgument) -> None:
    """Remove a context from the config file (its token is forgotten, not revoked: use logout for that)."""
    config = state().config()
    if config.contexts.pop(name, None) is None:
        raise UsageProblem(f'There is no context "{name}" in {config.path}.')
    if config.current_context == name:
        config.current_context = None
    _save(config)
    make_console().print(Text(f'Deleted context "{name}".'), soft_wrap=True)


def _token_state(expires_at: str | None) -> str:
    if not expires_at:
        return "set"
    try:
        moment = datetime.fromisoformat(expires_at)
    except ValueError:
        return f"expires {expires_at}"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return f"{'expired' if moment <= datetime.now(UTC) else 'expires'} {when(moment)}"


def _save(config: Any) -> None:
    try:
        config.save()
    except ConfigFileError as error:
        raise UsageProblem(str(error)) from None
