"""``stop_components``, ``start_components`` and ``upgrade_deployment_version``: changes through the API.

Each asks the Styrmin API for a change linked to the calling hook step (``started_by_step``), so the
task it creates is listed under that step and shows "Started by"; then it waits for that task and
raises with its error if it fails. The agent runs such a task while its parent still runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import styrmin
from styrmin_backend.actions._arguments import check_context, check_name, checked_components
from styrmin_backend.actions._backend import ActionBackend, backend_for
from styrmin_backend.actions._rules import calling_api
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError


async def stop_components(components: Sequence[str], context: GlobalContext) -> styrmin.Task:
    """Stop ``components`` of the deployment (scale their workloads to zero) and wait until they are.

    Stopping stopped components is harmless: the task succeeds and changes nothing.

    Returns:
        The ended task, which succeeded.

    Raises:
        ActionError: an argument is wrong, the API refused the call, or the task failed (its error is
            in the message).
    """
    return await _set_components(components, context, running=False)


async def start_components(components: Sequence[str], context: GlobalContext) -> styrmin.Task:
    """Start ``components`` of the deployment again, at their configured replicas, and wait until they run.

    Returns:
        The ended task, which succeeded.

    Raises:
        ActionError: an argument is wrong, the API refused the call, or the task failed (its error is
            in the message).
    """
    return await _set_components(components, context, running=True)


async def upgrade_deployment_version(target_version: str, context: GlobalContext) -> styrmin.Task | None:
    """Apply the change's target now: the chart at ``target_version`` with the change's driver version.

    The chart is upgraded through Helm with the deployment's configuration and the components are
    waited for. When the deployment already runs that application and driver version, no task starts.

    Returns:
        The ended task, which succeeded; None when there was nothing to upgrade.

    Raises:
        ActionError: an argument is wrong, the API refused the call, or the task failed (its error is
            in the message).
    """
    check_name(
        "upgrade_deployment_version", "target_version", target_version, "target_version=target_version"
    )
    check_context("upgrade_deployment_version", context)
    backend = backend_for(context)
    doing = f'upgrade_deployment_version("{target_version}") of deployment "{context.deployment_name}"'
    async with calling_api(backend, doing):
        # A retried action whose upgrade task is still running gets that task back from the server
        # (services.changes.unfinished_started_task), and waits for it instead of a second one.
        running = await backend.api.request_upgrade(
            context.deployment_name,
            app_version=target_version,
            driver_version=context.driver_version,
            started_by_step=context.hook_step_id,
        )
        if running is None:
            backend.log(f"{doing}: the deployment already runs it; no task started")
            return None
        return await _wait(backend, running, doing)


async def _set_components(
    components: Sequence[str], context: GlobalContext, *, running: bool
) -> styrmin.Task:
    name = "start_components" if running else "stop_components"
    components = checked_components(name, components)
    check_context(name, context)
    backend = backend_for(context)
    doing = f'{name}({json.dumps(list(components))}) of deployment "{context.deployment_name}"'
    async with calling_api(backend, doing):
        task_id = await backend.api.request_components(
            context.deployment_name, list(components), running=running, started_by_step=context.hook_step_id
        )
        if task_id is None:  # the API always records a stop or start; kept for safety
            raise ActionError(f"{doing}: the Styrmin API started no task.")
        return await _wait(backend, task_id, doing)


async def _wait(backend: ActionBackend, task_id: int, doing: str) -> styrmin.Task:
    backend.log(f"{doing}: waiting for task {task_id}")
    task = await backend.api.wait_for_task(task_id)
    if task.status == styrmin.TaskStatus.FAILED:
        raise ActionError(
            f"{doing}: task {task.id} ({task.type.value}) failed: {task.error or 'no error given'}"
        )
    if task.status == styrmin.TaskStatus.CANCELLED:
        raise ActionError(f"{doing}: task {task.id} ({task.type.value}) was cancelled.")
    backend.log(f"{doing}: task {task.id} succeeded")
    return task
