"""Who is calling: the user behind a request's token or session, and what an actions token may reach."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session

from styrmin_backend.domain.actions_scope import ActionsScope, ScopeCheck, actions_route_check, refusal
from styrmin_backend.domain.errors import NotAllowed
from styrmin_backend.domain.roles import Role
from styrmin_backend.store.models import TaskRow

ACTIONS_TOKEN_KIND = "actions"  # noqa: S105 - a kind, not a secret


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
    actions_scope: ActionsScope | None = None
    """For a styrmin-actions token: the deployment and task it may act on."""

    @property
    def is_actions_token(self) -> bool:
        """Whether the caller is the actions of a reconciliation, limited to their deployment and task."""
        return self.token_kind == ACTIONS_TOKEN_KIND


def check_actions_scope(
    session: Session,
    principal: Principal,
    method: str,
    route_path: str,
    path_params: Mapping[str, str],
    query_params: Mapping[str, str],
    request_path: str,
) -> None:
    """Refuse (NotAllowed) a call by an actions token to anything beyond its own deployment and task.

    Every authenticated route calls this, so a route that ``ACTIONS_ROUTES`` does not list is refused.
    """
    if not principal.is_actions_token:
        return
    scope = principal.actions_scope
    check = actions_route_check(method, route_path)
    if check is ScopeCheck.ANYTHING:
        return
    if check is None or scope is None:
        raise NotAllowed(refusal(scope, f"call {method.upper()} {request_path}"))
    match check:
        case ScopeCheck.STEP_OF_OWN_TASK:
            return
        case ScopeCheck.OWN_DEPLOYMENT:
            name = path_params.get("name", "")
            if name != scope.deployment:
                raise NotAllowed(refusal(scope, f'act on deployment "{name}"'))
        case ScopeCheck.OWN_DEPLOYMENT_QUERY:
            name = query_params.get("deployment", "")
            if name != scope.deployment:
                raise NotAllowed(
                    refusal(scope, f'list tasks beyond its deployment; add "deployment={scope.deployment}"')
                )
        case ScopeCheck.OWN_TASK:
            if path_params.get("task_id") != str(scope.task_id):
                raise NotAllowed(refusal(scope, f"read task {path_params.get('task_id')}"))
        case ScopeCheck.TASK_OF_OWN_DEPLOYMENT:
            task_id = path_params.get("task_id", "")
            task = session.get(TaskRow, int(task_id)) if task_id.isdigit() and len(task_id) <= 15 else None
            if task is None or task.deployment_name != scope.deployment:
                raise NotAllowed(refusal(scope, f"read task {task_id}, which is not of its deployment"))
        case ScopeCheck.OWN_DRIVER:
            name = path_params.get("name", "")
            if name != scope.driver:
                raise NotAllowed(refusal(scope, f'read driver "{name}"'))
