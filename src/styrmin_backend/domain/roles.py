"""Roles and what each allows."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A user's role. Admin > Read/write > Read-only."""

    ADMIN = "admin"
    READ_WRITE = "read-write"
    READ_ONLY = "read-only"

    @property
    def label(self) -> str:
        """The role's name as people read it."""
        return _LABELS[self]


_LABELS = {Role.ADMIN: "Admin", Role.READ_WRITE: "Read/write", Role.READ_ONLY: "Read-only"}
_RANK = {Role.READ_ONLY: 0, Role.READ_WRITE: 1, Role.ADMIN: 2}


def role_allows(role: Role, needed: Role) -> bool:
    """Whether a user with ``role`` may do what needs ``needed``."""
    return _RANK[role] >= _RANK[needed]


def role_refusal(username: str, role: Role, needed: Role) -> str | None:
    """Why ``username`` (with ``role``) may not do what needs ``needed``, or None when they may.

    The API, the pages and previews say it in these words, so a preview shows the refusal a request
    would meet.
    """
    if role_allows(role, needed):
        return None
    return (
        f'User "{username}" has the role {role.label}; this needs {needed.label}. '
        "Ask an administrator to change the role."
    )
