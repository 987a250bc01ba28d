"""Who is calling: the user behind a request's token or session."""

from __future__ import annotations

from dataclasses import dataclass

from styrmin_backend.domain.roles import Role


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of a request."""

    user_id: int
    username: str
    role: Role
    is_builtin: bool
    token_id: int
    token_kind: str
    actions_task_id: int | None = None
    """For a styrmin-actions token: the task of the reconciliation it belongs to."""
