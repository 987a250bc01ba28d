"""``styrminctl users``: list and manage users (administrators)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from styrmin._enums import Role
from styrmin.cli._common import (
    PLAIN_HELP,
    GetOutputOption,
    ListOutputOption,
    OutputOption,
    handle_errors,
    read_secret,
    state,
)
from styrmin.cli.output import GetFormat, ListFormat, OutputFormat, emit, emit_names, is_machine, make_console
from styrmin.cli.render import ROLE_LABELS, clean, user_line, users_table

if TYPE_CHECKING:
    from styrmin.models import User

app = typer.Typer(
    rich_markup_mode=PLAIN_HELP,
    help="Users and their roles (changing them needs the Admin role).",
    no_args_is_help=True,
)

UserArgument = Annotated[str, typer.Argument(help="The username.", show_default=False)]
RoleArgument = Annotated[Role, typer.Argument(help="admin, read-write or read-only.", show_default=False)]
StdinOption = Annotated[bool, typer.Option("--password-stdin", help="Read the password from standard input.")]


def _done(verb: str, user: User, output: OutputFormat) -> None:
    if is_machine(output):
        emit(user, output)
    else:
        make_console().print(user_line(verb, user), soft_wrap=True)


@app.command("list")
@handle_errors
def list_users(output: ListOutputOption = ListFormat.TEXT) -> None:
    """List the users (styrmin-actions is the built-in user of actions)."""
    with state().client() as client:
        found = client.users.list()
    if is_machine(output):
        emit(found, output)
    elif output == ListFormat.NAME:
        emit_names("user", [u.username for u in found])
    else:
        make_console().print(users_table(found))


@app.command()
@handle_errors
def get(username: UserArgument, output: GetOutputOption = GetFormat.TEXT) -> None:
    """Show one user."""
    with state().client() as client:
        user = client.users.get(username)
    if output == GetFormat.NAME:
        emit_names("user", [user.username])
    elif is_machine(output):
        emit(user, output)
    else:
        make_console().print(users_table([user]))


@app.command()
@handle_errors
def create(
    username: UserArgument,
    role: Annotated[Role, typer.Option("--role", "-r", help="admin, read-write or read-only.")],
    password_stdin: StdinOption = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Make a user with a role and a password (typed twice at a prompt, or read from stdin)."""
    password = read_secret("Password", password_stdin, confirm=True)
    with state().client() as client:
        user = client.users.create(username, role=role, password=password)
    _done("Created", user, output)


@app.command("set-role")
@handle_errors
def set_role(username: UserArgument, role: RoleArgument, output: OutputOption = OutputFormat.TEXT) -> None:
    """Change a user's role."""
    with state().client() as client:
        user = client.users.set_role(username, role)
    _done("Updated", user, output)


@app.command()
@handle_errors
def deactivate(username: UserArgument, output: OutputOption = OutputFormat.TEXT) -> None:
    """Deactivate a user: it cannot log in and its tokens are refused until it is activated."""
    with state().client() as client:
        user = client.users.deactivate(username)
    _done("Deactivated", user, output)


@app.command()
@handle_errors
def activate(username: UserArgument, output: OutputOption = OutputFormat.TEXT) -> None:
    """Activate a deactivated user."""
    with state().client() as client:
        user = client.users.activate(username)
    _done("Activated", user, output)


@app.command("set-password")
@handle_errors
def set_password(
    username: UserArgument,
    password_stdin: StdinOption = False,
    generate: Annotated[
        bool, typer.Option("--generate", help="Let the server pick a random password and print it once.")
    ] = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Set a user's password (typed twice at a prompt, read from stdin, or generated)."""
    with state().client() as client:
        if generate:
            reset = client.users.reset_password(username)
            if is_machine(output):
                emit(reset, output)
            else:
                make_console().print(
                    Text(f"New password of {clean(reset.username)} (shown once): {clean(reset.password)}"),
                    soft_wrap=True,
                )
            return
        password = read_secret("New password", password_stdin, confirm=True)
        user = client.users.set_password(username, password)
    if is_machine(output):
        emit(user, output)
    else:
        role = ROLE_LABELS.get(user.role.value, user.role.value)
        make_console().print(Text(f"Set the password of {clean(user.username)} ({role})."), soft_wrap=True)
