"""Users: names, the built-in users and the rules about them."""

from __future__ import annotations

import re

from styrmin_backend.domain.errors import InvalidInput, NotAuthenticated, Refused
from styrmin_backend.domain.roles import Role

ADMIN_USERNAME = "admin"
"""The user made on first start."""

ACTIONS_USERNAME = "styrmin-actions"
"""The built-in user whose short-lived tokens the actions of a reconciliation use."""


BUILTIN_USERNAMES = frozenset({ACTIONS_USERNAME})

PASSWORD_MIN_LENGTH = 8
PASSWORD_MAX_LENGTH = 1024
_USERNAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")


def check_username(username: str) -> None:
    """Raise InvalidInput unless ``username`` is a valid, non-reserved user name."""
    if not _USERNAME.fullmatch(username):
        raise InvalidInput(
            f'"{username}" is not a valid user name; use 1 to 64 lower-case letters, digits, ".", "_" or '
            '"-", starting and ending with a letter or digit.',
            field="username",
        )
    if username in BUILTIN_USERNAMES:
        raise Refused(
            f'"{username}" is a built-in user and already exists; choose another name.', field="username"
        )


def check_password(password: str) -> None:
    """Raise InvalidInput unless ``password`` is long enough to be used."""
    if len(password) < PASSWORD_MIN_LENGTH:
        raise InvalidInput(
            f"The password is too short; use at least {PASSWORD_MIN_LENGTH} characters.", field="password"
        )
    if len(password) > PASSWORD_MAX_LENGTH:
        raise InvalidInput(
            f"The password is too long; use at most {PASSWORD_MAX_LENGTH} characters.", field="password"
        )


def check_password_can_be_set(username: str) -> None:
    """Raise Refused for a built-in user: no one can log in as it, so it has no password."""
    if username in BUILTIN_USERNAMES:
        raise Refused(
            f"{username} is a built-in user without a password: Styrmin refuses to set or reset its "
            "password, so that only Styrmin's own flows and actions act as it.",
            field="username",
        )


def check_role_can_be_given(username: str, role: Role) -> None:
    """Raise Refused for Admin given to a built-in user: its tokens act only within one deployment and
    task, where Admin allows nothing more, and a list of admins must hold only people."""
    if username in BUILTIN_USERNAMES and role is Role.ADMIN:
        raise Refused(
            f"{username} is a built-in user: its role is Read/write, or Read-only to stop the drivers' "
            "actions from changing anything. Admin is refused: its tokens act only on their own "
            "deployment and task, where it allows nothing more.",
            field="role",
        )


def check_login_allowed(username: str) -> None:
    """Raise NotAuthenticated for a login as a built-in user, or with a name no user can have."""
    if any(ord(character) < 0x20 or character == "\x7f" for character in username):
        raise NotAuthenticated(
            "A user name has no control characters (tab, newline, NUL); check what was typed.",
            field="username",
        )
    if username in BUILTIN_USERNAMES:
        raise NotAuthenticated(
            f"No one can log in as {username}: it is the built-in user of Styrmin's actions and has no "
            "password. Log in with your own user.",
            field="username",
        )
