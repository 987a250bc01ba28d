"""Users: listing, creating, roles, activation, passwords, and the first admin."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import Conflict, NotFound
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.users import (
    ADMIN_USERNAME,
    check_password,
    check_password_can_be_set,
    check_role_can_be_given,
    check_username,
)
from styrmin_backend.services.principal import Principal
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.services.secrets import hash_password, new_password
from styrmin_backend.store.models import UserRow

ADMIN_PASSWORD_FILE = "admin-password.txt"  # noqa: S105 - a file name


class User(ReadModel):
    """A user as others may see it: name, role, whether it is active or built in; never its password."""

    id: int
    username: str
    role: str
    is_active: bool
    is_builtin: bool
    has_password: bool
    created_at: datetime


def list_users(session: Session) -> list[User]:
    """Every user, built-in ones included, by name."""
    return [User.model_validate(row) for row in session.scalars(select(UserRow).order_by(UserRow.username))]


def get_user(session: Session, username: str) -> User:
    """The user called ``username``; raises NotFound."""
    return User.model_validate(_user_row(session, username))


def _user_row(session: Session, username: str) -> UserRow:
    user = session.scalars(select(UserRow).where(UserRow.username == username)).one_or_none()
    if user is None:
        raise NotFound(f'There is no user "{username}".', field="username")
    return user


def create_user(session: Session, username: str, role: Role, password: str) -> User:
    """Make a user with a password; raises Conflict when the name is taken."""
    check_username(username)
    check_password(password)
    if session.scalars(select(UserRow.id).where(UserRow.username == username)).first() is not None:
        raise Conflict(f'A user "{username}" already exists; choose another name.', field="username")
    user = UserRow(
        username=username,
        role=role.value,
        password_hash=hash_password(password),
        is_active=True,
        is_builtin=False,
        created_at=utcnow(),
    )
    session.add(user)
    session.flush()
    return User.model_validate(user)


def update_user(
    session: Session, username: str, *, by: Principal, role: Role | None = None, is_active: bool | None = None
) -> User:
    """Change a user's role and/or activation; an admin cannot demote or deactivate themself."""
    user = _user_row(session, username)
    if user.id == by.user_id and (role not in (None, Role.ADMIN) or is_active is False):
        raise Conflict(
            "You cannot take away your own Admin role or deactivate yourself; ask another administrator.",
            field="role" if role is not None else "is_active",
        )
    if role is not None:
        check_role_can_be_given(user.username, role)
        user.role = role.value
    if is_active is not None:
        user.is_active = is_active
    return User.model_validate(user)


def set_password(session: Session, username: str, password: str) -> User:
    """Set a user's password; refused for built-in users."""
    check_password_can_be_set(username)
    check_password(password)
    user = _user_row(session, username)
    user.password_hash = hash_password(password)
    return User.model_validate(user)


def reset_password(session: Session, username: str) -> str:
    """Give a user a new random password and return it; refused for built-in users."""
    check_password_can_be_set(username)
    user = _user_row(session, username)
    password = new_password()
    user.password_hash = hash_password(password)
    return password


@dataclass(frozen=True)
class FirstAdmin:
    """The admin made on first start; ``generated_password`` is set when Styrmin chose it."""

    username: str
    generated_password: str | None
    password_file: Path | None


def ensure_admin(session: Session, password: str | None, data_dir: Path) -> FirstAdmin | None:
    """On first start, make the admin user; returns None when an admin user already exists."""
    if session.scalars(select(UserRow.id).where(UserRow.username == ADMIN_USERNAME)).first() is not None:
        return None
    generated = password is None
    chosen = password if password is not None else new_password()
    check_password(chosen)
    session.add(
        UserRow(
            username=ADMIN_USERNAME,
            role=Role.ADMIN.value,
            password_hash=hash_password(chosen),
            is_active=True,
            is_builtin=False,
            created_at=utcnow(),
        )
    )
    session.flush()
    if not generated:
        return FirstAdmin(ADMIN_USERNAME, None, None)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / ADMIN_PASSWORD_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(chosen + "\n")
    path.chmod(0o600)
    return FirstAdmin(ADMIN_USERNAME, chosen, path)
