"""What the styrmin-actions token of one reconciliation may do: act on its own deployment and task only.

Each route an action may call is listed here with what its path must name. A route that is not
listed is refused to every actions token, so a new route is closed to actions until it is added.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ScopeCheck(StrEnum):
    """What a route's path (or query) must name for an actions token to call it."""

    ANYTHING = "anything"
    """Harmless for any caller (``whoami``)."""
    OWN_DEPLOYMENT = "own-deployment"
    """The ``name`` path parameter is the token's deployment."""
    OWN_DEPLOYMENT_QUERY = "own-deployment-query"
    """The ``deployment`` query parameter is the token's deployment (a filtered list)."""
    TASK_OF_OWN_DEPLOYMENT = "task-of-own-deployment"
    """The ``task_id`` path parameter is a task of the token's deployment (a task an action started)."""
    OWN_TASK = "own-task"
    """The ``task_id`` path parameter is the token's own task."""
    OWN_DRIVER = "own-driver"
    """The ``name`` path parameter is the driver of the token's deployment."""
    STEP_OF_OWN_TASK = "step-of-own-task"
    """A step of the token's own task: the route itself checks the step (notes and output)."""


ACTIONS_ROUTES: dict[tuple[str, str], ScopeCheck] = {  # paths below the API prefix (/api/v1)
    ("GET", "/whoami"): ScopeCheck.ANYTHING,
    ("GET", "/deployments/{name}"): ScopeCheck.OWN_DEPLOYMENT,
    ("POST", "/deployments/{name}/stop"): ScopeCheck.OWN_DEPLOYMENT,
    ("POST", "/deployments/{name}/start"): ScopeCheck.OWN_DEPLOYMENT,
    ("POST", "/deployments/{name}/upgrade"): ScopeCheck.OWN_DEPLOYMENT,
    ("PUT", "/deployments/{name}/configuration"): ScopeCheck.OWN_DEPLOYMENT,
    ("GET", "/tasks"): ScopeCheck.OWN_DEPLOYMENT_QUERY,
    ("GET", "/tasks/{task_id}"): ScopeCheck.TASK_OF_OWN_DEPLOYMENT,
    ("GET", "/tasks/{task_id}/configuration"): ScopeCheck.OWN_TASK,
    ("GET", "/drivers/{name}/versions/{version}"): ScopeCheck.OWN_DRIVER,
    ("GET", "/drivers/{name}/versions/{version}/archive"): ScopeCheck.OWN_DRIVER,
    ("POST", "/agent/steps/{step_id}/notes"): ScopeCheck.STEP_OF_OWN_TASK,
    ("PUT", "/agent/steps/{step_id}/output"): ScopeCheck.STEP_OF_OWN_TASK,
}
"""Every route an actions token may call, with what it may name: the seed's primitives (stop, start,
upgrade, waiting for the tasks they start, notes and output on the hook step, the driver's
components) and a driver's own SDK calls about its deployment. Deleting the deployment is not here."""


@dataclass(frozen=True)
class ActionsScope:
    """The deployment and task an actions token belongs to."""

    deployment: str
    task_id: int
    driver: str


def actions_route_check(method: str, route_path: str) -> ScopeCheck | None:
    """What an actions token must name to call ``method route_path``; None when it may not call it.

    ``route_path`` is the route's path template below the API's prefix: ``/deployments/{name}``.
    """
    return ACTIONS_ROUTES.get((method.upper(), route_path))


def refusal(scope: ActionsScope | None, what: str) -> str:
    """The message of a 403 for an actions token that reached outside its deployment and task."""
    if scope is None:
        return (
            f"This token of styrmin-actions belongs to no reconciliation; it cannot {what}. "
            "Styrmin gives each reconciliation's actions their own token."
        )
    return (
        f'This token belongs to the actions of deployment "{scope.deployment}" (task {scope.task_id}); '
        f"it cannot {what}. An action's token acts only on its own deployment and task."
    )
