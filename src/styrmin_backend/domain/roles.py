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
