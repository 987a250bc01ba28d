"""``execute_backup_commands`` and ``create_backup``: primitives for the backup and restore hooks.

A backup action writes the backup's files with :func:`execute_backup_commands`: a Job like
``execute_commands``'s that finds the backup's folder in ``STYRMIN_BACKUP_DIR``; a restore action reads
them back the same way. An upgrade pre-hook calls :func:`create_backup` to take a backup first; the
Backup task it starts is linked to the hook step, as ``stop_components`` links its Stop task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import styrmin
from styrmin_backend.actions._arguments import check_context, checked_command_arguments
from styrmin_backend.actions._backend import backend_for
from styrmin_backend.actions._rules import calling_api
from styrmin_backend.actions.commands import DEFAULT_COMMAND_TIMEOUT_SECONDS, CommandResult, execute_commands
from styrmin_backend.actions.components import _wait
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.domain.backups import BACKUP_DIR_ENV


async def execute_backup_commands(
    command: Sequence[str] | str,
    image: str,
    context: GlobalContext,
    env_from_component: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_COMMAND_TIMEOUT_SECONDS,
) -> CommandResult:
    """Run ``command`` in a Job, as ``execute_commands`` does, with the backup's folder in ``STYRMIN_BACKUP_DIR``.

    Only in the backup hook (the command writes the backup's files there) and the restore hook (it
    reads them). Everything else is ``execute_commands``: env, output, errors, the earlier Job rule.
    With a bucket location the Job also gets ``STYRMIN_BACKUP_URL`` (and ``AWS_REGION``,
    ``AWS_ENDPOINT_URL_S3``) and the bucket's keys as ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY`` from a Secret of its namespace, for a command that streams objects
    itself; files left in the folder are uploaded by the agent.

    Raises:
        ActionError: an argument is wrong, called outside the backup and restore hooks, or as
            ``execute_commands`` raises.
        CommandFailed: the command failed; the end of its output is stored on the hook step.
    """
    _, extra_env, timeout = checked_command_arguments(
        "execute_backup_commands", command, image, context, env_from_component, env, timeout
    )
    if context.backup_folder is None:
        raise ActionError(
            f"execute_backup_commands runs only in the backup and restore hooks; this action runs in the "
            f"{context.hook.value} hook. Use execute_commands instead."
        )
    secret = context.backup_env_from
    return await execute_commands(
        command,
        image=image,
        context=context,
        env_from_component=env_from_component,
        env={**extra_env, **context.backup_env, BACKUP_DIR_ENV: context.backup_folder},
        timeout=timeout,
        _env_from_secrets=[secret] if secret else [],
    )


async def create_backup(context: GlobalContext) -> styrmin.Task:
    """Back up the deployment now, through its driver's backup hook, and wait until the backup ends.

    Meant for an upgrade pre-hook: the backup is labelled pre-upgrade, and the failed upgrade's page
    offers to restore it. A retried action whose backup task still runs waits for that one.

    Returns:
        The ended Backup task, which succeeded.

    Raises:
        ActionError: context is not a GlobalContext, the API refused (e.g. the driver declares no
            backup action) or the backup failed.
    """
    check_context("create_backup", context)
    backend = backend_for(context)
    doing = f'create_backup() of deployment "{context.deployment_name}"'
    async with calling_api(backend, doing):
        # A retried action whose backup task still runs gets that task back from the server.
        running = await backend.api.request_backup(
            context.deployment_name, started_by_step=context.hook_step_id
        )
        return await _wait(backend, running, doing)
