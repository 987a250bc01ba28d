"""The ``execute_commands`` primitive: a command in a Kubernetes Job of the deployment's namespace.

Each Job is labelled with the deployment and stays after it ends, so its pod's log can be read with
kubectl. The next ``execute_commands`` of the same deployment deletes it, once it has ended, and notes
that on its hook step; one still running means another change is running its action, so the new
action fails rather than run two commands of one deployment at once.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from styrmin_backend.actions._arguments import checked_command_arguments
from styrmin_backend.actions._backend import (
    ActionBackend,
    ActionJob,
    ApiFailed,
    ApiRefused,
    ApiUnavailable,
    backend_for,
)
from styrmin_backend.actions._jobs import (
    ACTION_JOB_LABEL,
    DEPLOYMENT_LABEL,
    HOOK_STEP_LABEL,
    JOB_CONTAINER,
    JOB_NAME_LABEL,
    OUTPUT_READ_ANNOTATION,
    TASK_LABEL,
)
from styrmin_backend.actions._rules import (
    calling_api,
    component_pod_template,
    declared_component,
    driver_spec,
)
from styrmin_backend.actions._tail import OutputTail
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError, CommandFailed
from styrmin_backend.domain.secrets import SECRET_SET
from styrmin_backend.drivers.workloads import component_container, env_secret_key, env_secret_name

__all__ = [
    "ACTION_JOB_LABEL",
    "DEFAULT_COMMAND_TIMEOUT_SECONDS",
    "DEPLOYMENT_LABEL",
    "HOOK_STEP_LABEL",
    "JOB_CONTAINER",
    "JOB_NAME_LABEL",
    "OUTPUT_READ_ANNOTATION",
    "TASK_LABEL",
    "CommandResult",
    "execute_commands",
]

DEFAULT_COMMAND_TIMEOUT_SECONDS = 3600
"""How long a command may run by default: an hour, for long migrations."""


_WAIT_GRACE_SECONDS = 30
"""Beyond the Job's own deadline, how long to wait for Kubernetes to end it before deleting it."""


@dataclass(frozen=True)
class CommandResult:
    """How a command of ``execute_commands`` ended, successfully.

    Attributes:
        job_name: the Job that ran it, left in the namespace until the next action's Job.
        exit_code: 0.
        output_tail: the last lines of its output (at most 200 lines, 64 KiB), secrets redacted.
        output_truncated: whether earlier output was cut.
    """

    job_name: str
    exit_code: int
    output_tail: str
    output_truncated: bool


async def execute_commands(
    command: Sequence[str] | str,
    image: str,
    context: GlobalContext,
    env_from_component: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_COMMAND_TIMEOUT_SECONDS,
    _env_from_secrets: Sequence[str] = (),
) -> CommandResult:
    """Run ``command`` in ``image`` as a Kubernetes Job in the deployment's namespace, and wait for it.

    Args:
        command: the command and its arguments (``["shop", "migrate"]``); a string runs with ``sh -c``.
        image: the image to run, e.g. the component's image at the target version.
        context: the context Styrmin passed to the action.
        env_from_component: a component whose container's env (and envFrom) the Job gets, as its
            workload has them, with the user's env vars of the new configuration set on top.
        env: more env vars, set last.
        timeout: seconds the command may run (at least 1); then Kubernetes stops it and the action fails.

    Returns:
        The exit code (0) and the end of the output.

    Raises:
        ActionError: an argument is wrong (checked before anything is created), a Job of an earlier
            action of the deployment is still running, or the Job could not be started.
        CommandFailed: the command failed; the end of its output is stored on the hook step.
    """
    argv, extra_env, timeout = checked_command_arguments(
        "execute_commands", command, image, context, env_from_component, env, timeout
    )
    doing = f'execute_commands({shlex.join(argv)!r}) of deployment "{context.deployment_name}"'
    backend = backend_for(context)
    cluster = backend.cluster
    async with calling_api(backend, doing):
        container_env: list[dict[str, Any]] = []
        env_from: list[dict[str, Any]] = []
        # The earlier Jobs are cleared while the component's env is read: neither needs the other.
        clearing = asyncio.ensure_future(_delete_ended_action_jobs(backend, context))
        try:
            if env_from_component is not None:
                container_env, env_from = await _component_env(backend, context, env_from_component)
        finally:
            await clearing  # its error (a Job of an earlier action still running) comes first
        container_env = _set_env(container_env, extra_env)
        env_from = [*env_from, *({"secretRef": {"name": name}} for name in _env_from_secrets)]
        for _ in range(3):  # a random suffix that is taken: draw another
            job_name = _job_name(context.deployment_name, argv)
            manifest = _job_manifest(context, job_name, argv, image, container_env, env_from, timeout)
            resource_version = await cluster.create_job(manifest)
            if resource_version is not None:
                break
        else:
            raise ActionError(f"{doing}: Kubernetes refused Job {job_name}: its name is taken.")
        backend.log(f"Started Job {job_name} in namespace {context.namespace}: {shlex.join(argv)} in {image}")
        try:
            async with asyncio.timeout(timeout + _WAIT_GRACE_SECONDS):
                job = await cluster.wait_for_job_end(context.namespace, job_name, resource_version)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            # The action gives up on the Job: do not leave its command running behind it.
            await asyncio.shield(cluster.delete_job(context.namespace, job_name))
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise ActionError(
                f"Job {job_name} did not end within {timeout:g} seconds (the timeout of {doing}); "
                "it was deleted. Give execute_commands a longer timeout if the command needs it."
            ) from None
        return await _result(backend, context, job, argv, timeout)


async def _component_env(
    backend: ActionBackend, context: GlobalContext, component: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The env and envFrom of the component container, with the new configuration's env vars on top.

    The workload may still have the previous configuration: a var the new one sets replaces it, and
    a var the new one removed stays, as the workload has it.
    """
    spec = await driver_spec(backend, context)
    declared = declared_component(spec, component)
    template = await component_pod_template(backend, context, declared)
    try:
        container = component_container(template, declared)
    except LookupError as error:
        raise ActionError(f"execute_commands(env_from_component={component!r}): {error}") from None
    copied = [dict(var) for var in container.get("env") or []]
    configured = context.configuration.env.get(component, {})
    if any(SECRET_SET in value for value in configured.values()):
        # The context (a Prefect parameter) shows secret values only as set: read them with the token.
        configured = await backend.api.configured_env(context.task_id, component)
        configured = await _without_values_in_env_secret(backend, context, component, copied, configured)
    env = _set_env(copied, configured)
    return env, [dict(source) for source in container.get("envFrom") or []]


async def _without_values_in_env_secret(
    backend: ActionBackend,
    context: GlobalContext,
    component: str,
    copied: list[dict[str, Any]],
    configured: Mapping[str, str],
) -> dict[str, str]:
    """``configured`` without the secret vars the workload already reads, with the same value, from
    the deployment's env Secret: the Job keeps their ``secretKeyRef``, so its spec holds no secret.

    A value the Secret does not hold yet (the chart of this change is not applied) is set as a value.
    """
    secret_name = env_secret_name(context.deployment_name)
    referenced = {
        str(var.get("name")): ref.get("key")
        for var in copied
        if (ref := (var.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") == secret_name
    }
    if not referenced:
        return dict(configured)
    stored = await backend.cluster.secret_data(context.namespace, secret_name) or {}
    return {
        name: value
        for name, value in configured.items()
        if not (
            referenced.get(name) == env_secret_key(component, name)
            and stored.get(env_secret_key(component, name)) == value
        )
    }


def _set_env(env: list[dict[str, Any]], values: Mapping[str, str]) -> list[dict[str, Any]]:
    """``env`` with each of ``values`` set: replaced where the name is there, else added at the end."""
    merged = [dict(var) for var in env]
    index = {var.get("name"): position for position, var in enumerate(merged)}
    for name, value in values.items():
        entry = {"name": name, "value": str(value)}
        if name in index:
            merged[index[name]] = entry
        else:
            index[name] = len(merged)
            merged.append(entry)
    return merged


async def _delete_ended_action_jobs(backend: ActionBackend, context: GlobalContext) -> None:
    """Delete the Jobs earlier actions of this deployment left, once ended; fail if one still runs."""
    labels = {DEPLOYMENT_LABEL: context.deployment_name, ACTION_JOB_LABEL: "true"}
    for job in await backend.cluster.list_action_jobs(context.namespace, labels):
        same_task = job.labels.get(TASK_LABEL) == str(context.task_id)
        if not job.ended:
            if same_task:
                continue  # another action of this change's hook, running next to this one
            raise ActionError(
                f'Job {job.name} of an earlier action of deployment "{context.deployment_name}" is still '
                f"running (task {job.labels.get(TASK_LABEL, 'unknown')}). Wait for it to end, then request "
                "the change again."
            )
        if same_task and job.annotations.get(OUTPUT_READ_ANNOTATION) != "true":
            continue  # its action may still be reading its output
        if await backend.cluster.delete_job(context.namespace, job.name):
            await backend.api.add_step_note(context.hook_step_id, deleted_job_note(job))


def deleted_job_note(job: ActionJob) -> str:
    """The note on the hook step naming a Job deleted before a new one started.

    >>> deleted_job_note(ActionJob("shop-migrate-7f3c", ended=True, succeeded=True))
    'Deleted Job shop-migrate-7f3c, left by an earlier action (it succeeded), before starting a new one.'
    """
    outcome = "succeeded" if job.succeeded else "failed"
    return f"Deleted Job {job.name}, left by an earlier action (it {outcome}), before starting a new one."


def _job_name(deployment: str, argv: list[str]) -> str:
    """``shop-migrate-7f3c``: the deployment, the command's last plain word, and a random suffix."""
    words = [re.sub(r"[^a-z0-9-]+", "-", part.lower()).strip("-") for part in argv]
    word = next((w for w in reversed(words) if w and not w[0].isdigit() and len(w) <= 20), "command")
    suffix = secrets.token_hex(2)
    prefix = f"{deployment}-{word}"[: 63 - len(suffix) - 1].rstrip("-")
    return f"{prefix}-{suffix}"


def _job_manifest(
    context: GlobalContext,
    name: str,
    argv: list[str],
    image: str,
    env: list[dict[str, Any]],
    env_from: list[dict[str, Any]],
    timeout: float,
) -> dict[str, Any]:
    labels = {
        DEPLOYMENT_LABEL: context.deployment_name,
        ACTION_JOB_LABEL: "true",
        TASK_LABEL: str(context.task_id),
        HOOK_STEP_LABEL: str(context.hook_step_id),
        "app.kubernetes.io/managed-by": "styrmin",
    }
    container: dict[str, Any] = {"name": JOB_CONTAINER, "image": image, "command": argv}
    if env:
        container["env"] = env
    if env_from:
        container["envFrom"] = env_from
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": context.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(timeout),
            "template": {
                "metadata": {"labels": {**labels, JOB_NAME_LABEL: name}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


async def _result(
    backend: ActionBackend, context: GlobalContext, job: ActionJob, argv: list[str], timeout: float
) -> CommandResult:
    name = job.name
    cluster = backend.cluster
    pod = await cluster.job_pod(context.namespace, name)
    tail = OutputTail()
    if pod.name is not None and pod.exit_code is not None:
        await cluster.read_job_log(context.namespace, pod.name, tail)
    token = backend.api.token
    text, truncated = tail.redacted([token] if token else [])
    await cluster.mark_job_output_read(context.namespace, name)
    if job.succeeded and pod.exit_code in (0, None):
        backend.log(f"Job {name} succeeded")
        return CommandResult(name, 0, text, truncated)
    # The command's failure is the error users need; a refused store only adds to it.
    stored_error: str | None = None
    try:
        await backend.api.store_step_output(context.hook_step_id, text, truncated)
    except (ApiUnavailable, ApiRefused, ApiFailed) as error:
        stored_error = str(error)
    reason = job.failure_reason or "Kubernetes gave no reason."
    if reason.startswith("DeadlineExceeded"):
        message = (
            f"Job {name} did not end within {timeout:g} seconds, the timeout of its command "
            f"{shlex.join(argv)!r}; Kubernetes stopped it. Give execute_commands a longer timeout if it needs one."
        )
    elif pod.exit_code is None:
        message = (
            f"Job {name} failed before its command {shlex.join(argv)!r} ended: {pod.why_not_run or reason}"
        )
    else:
        message = f"Job {name} failed: its command {shlex.join(argv)!r} exited with code {pod.exit_code}."
        last = next((line for line in reversed(text.splitlines()) if line.strip()), None)
        if last is not None:
            message += f" Its last line: {last[:300]}"
    if stored_error is not None:
        message += f" Its output could not be stored on the hook step: {stored_error}"
    elif text:
        message += " The end of its output is stored on the hook step."
    raise CommandFailed(
        message, job_name=name, exit_code=pod.exit_code, output_tail=text, output_truncated=truncated
    )
