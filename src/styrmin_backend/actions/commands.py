"""The ``execute_commands`` primitive: a command in a Kubernetes Job of the deployment's namespace.

Each Job is labelled with the deployment and stays after it ends, so its pod's log can be read with
kubectl. The next ``execute_commands`` of the same deployment deletes it, once it has ended, and notes
that on its hook step; one still running means another change is running its action, so the new
action fails rather than run two commands of one deployment at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod, PodLog
from lightkube.types import CascadeType

import styrmin
from styrmin_backend.actions._api import (
    add_step_note,
    configured_env,
    declared_component,
    driver_spec,
    log_progress,
    store_step_output,
    styrmin_client,
)
from styrmin_backend.actions._kube import component_pod_template, kube_client
from styrmin_backend.actions._tail import OutputTail
from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError, CommandFailed
from styrmin_backend.drivers.workloads import component_container

DEFAULT_COMMAND_TIMEOUT_SECONDS = 3600
"""How long a command may run by default: an hour, for long migrations."""

JOB_CONTAINER = "command"
"""The name of the one container of an action's Job."""

DEPLOYMENT_LABEL = "styrmin.io/deployment"
ACTION_JOB_LABEL = "styrmin.io/action-job"
"""Set to ``"true"`` on every Job that execute_commands starts, and on its pods."""
TASK_LABEL = "styrmin.io/task"
HOOK_STEP_LABEL = "styrmin.io/hook-step"
JOB_NAME_LABEL = "styrmin.io/job"
OUTPUT_READ_ANNOTATION = "styrmin.io/output-read"
"""Set once the action that started a Job has read its result: the Job may then be deleted."""

_LOG_CHUNK_BYTES = 64 * 1024
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
) -> CommandResult:
    """Run ``command`` in ``image`` as a Kubernetes Job in the deployment's namespace, and wait for it.

    Args:
        command: the command and its arguments (``["shop", "migrate"]``); a string runs with ``sh -c``.
        image: the image to run, e.g. the component's image at the target version.
        context: the context Styrmin passed to the action.
        env_from_component: a component whose container's env (and envFrom) the Job gets, as its
            workload has them, with the user's env vars of the new configuration set on top.
        env: more env vars, set last.
        timeout: seconds the command may run; then Kubernetes stops it and the action fails.

    Returns:
        The exit code (0) and the end of the output.

    Raises:
        ActionError: a Job of an earlier action of the deployment is still running, or the Job
            could not be started.
        CommandFailed: the command failed; the end of its output is stored on the hook step.
    """
    argv = ["sh", "-c", command] if isinstance(command, str) else [str(part) for part in command]
    if not argv:
        raise ActionError("execute_commands needs a command; give e.g. ['shop', 'migrate'].")
    doing = f'execute_commands({shlex.join(argv)!r}) of deployment "{context.deployment_name}"'
    async with styrmin_client(context, doing) as client, kube_client() as kube:
        container_env: list[dict[str, Any]] = []
        env_from: list[dict[str, Any]] = []
        if env_from_component is not None:
            container_env, env_from = await _component_env(client, kube, context, env_from_component)
        container_env = _set_env(container_env, env or {})
        await _delete_ended_action_jobs(client, kube, context)
        for attempt in range(3):
            job_name = _job_name(context.deployment_name, argv)
            manifest = _job_manifest(context, job_name, argv, image, container_env, env_from, timeout)
            try:
                created: Any = await kube.create(manifest)
                break
            except ApiError as error:
                if error.status.code == 409 and attempt < 2:  # the random suffix is taken: draw another
                    continue
                raise ActionError(
                    f"{doing}: Kubernetes refused Job {job_name}: {error.status.message}"
                ) from None
        log_progress(
            f"Started Job {job_name} in namespace {context.namespace}: {shlex.join(argv)} in {image}"
        )
        try:
            async with asyncio.timeout(timeout + _WAIT_GRACE_SECONDS):
                job = await _wait_for_end(kube, context.namespace, job_name, created.metadata.resourceVersion)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            # The action gives up on the Job: do not leave its command running behind it.
            await asyncio.shield(_delete_job(kube, context.namespace, job_name))
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise ActionError(
                f"Job {job_name} did not end within {timeout:g} seconds (the timeout of {doing}); "
                "it was deleted. Give execute_commands a longer timeout if the command needs it."
            ) from None
        return await _result(client, kube, context, job, argv, timeout)


async def _component_env(
    client: styrmin.AsyncClient, kube: AsyncClient, context: GlobalContext, component: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The env and envFrom of the component container, with the new configuration's env vars on top.

    The workload may still have the previous configuration: a var the new one sets replaces it, and
    a var the new one removed stays, as the workload has it.
    """
    spec = await driver_spec(client, context)
    declared = declared_component(spec, component)
    template = await component_pod_template(kube, context, declared)
    try:
        container = component_container(template, declared)
    except LookupError as error:
        raise ActionError(f"execute_commands(env_from_component={component!r}): {error}") from None
    copied = [dict(var) for var in container.get("env") or []]
    env = _set_env(copied, await configured_env(client, context, component))
    return env, [dict(source) for source in container.get("envFrom") or []]


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


async def _delete_ended_action_jobs(
    client: styrmin.AsyncClient, kube: AsyncClient, context: GlobalContext
) -> None:
    """Delete the Jobs earlier actions of this deployment left, once ended; fail if one still runs."""
    labels: dict[str, Any] = {DEPLOYMENT_LABEL: context.deployment_name, ACTION_JOB_LABEL: "true"}
    jobs: list[Any] = [job async for job in kube.list(Job, namespace=context.namespace, labels=labels)]
    for job in jobs:
        name = str(job.metadata.name)
        job_labels = job.metadata.labels or {}
        same_task = job_labels.get(TASK_LABEL) == str(context.task_id)
        if not _ended(job):
            if same_task:
                continue  # another action of this change's hook, running next to this one
            raise ActionError(
                f'Job {name} of an earlier action of deployment "{context.deployment_name}" is still running '
                f"(task {job_labels.get(TASK_LABEL, 'unknown')}). Wait for it to end, then request the "
                "change again."
            )
        if same_task and (job.metadata.annotations or {}).get(OUTPUT_READ_ANNOTATION) != "true":
            continue  # its action may still be reading its output
        if await _delete_job(kube, context.namespace, name):
            outcome = "succeeded" if _succeeded(job) else "failed"
            await add_step_note(
                client,
                context.hook_step_id,
                f"Deleted Job {name}, left by an earlier action (it {outcome}), before starting a new one.",
            )


async def _delete_job(kube: AsyncClient, namespace: str, name: str) -> bool:
    """Delete a Job and its pods; False when it was already gone."""
    try:
        await kube.delete(Job, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
    except ApiError as error:
        if error.status.code == 404:
            return False
        raise
    return True


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
) -> Any:
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
    return Job.from_dict(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": context.namespace, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": max(1, int(timeout)),
                "template": {
                    "metadata": {"labels": {**labels, JOB_NAME_LABEL: name}},
                    "spec": {"restartPolicy": "Never", "containers": [container]},
                },
            },
        }
    )


def _condition(job: Any, kind: str) -> bool:
    conditions = (job.status.conditions if job.status else None) or []
    return any(c.type == kind and c.status == "True" for c in conditions)


def _ended(job: Any) -> bool:
    return _condition(job, "Complete") or _condition(job, "Failed")


def _succeeded(job: Any) -> bool:
    return _condition(job, "Complete")


async def _wait_for_end(kube: AsyncClient, namespace: str, name: str, resource_version: str | None) -> Any:
    """The Job once it has ended, followed with a watch (read again whenever the watch stops)."""
    while True:
        with contextlib.suppress(ApiError):
            async for _, event_job in kube.watch(
                Job, namespace=namespace, fields={"metadata.name": name}, resource_version=resource_version
            ):
                followed: Any = event_job
                if _ended(followed):
                    return followed
                resource_version = followed.metadata.resourceVersion
        job: Any = await kube.get(Job, name, namespace=namespace)
        if _ended(job):
            return job
        resource_version = job.metadata.resourceVersion
        await asyncio.sleep(0.2)


async def _result(
    client: styrmin.AsyncClient,
    kube: AsyncClient,
    context: GlobalContext,
    job: Any,
    argv: list[str],
    timeout: float,
) -> CommandResult:
    name = job.metadata.name
    pod = await _job_pod(kube, context.namespace, name)
    exit_code, why_not_run = _exit_code(pod)
    tail = OutputTail()
    if pod is not None and exit_code is not None:
        await _read_log(kube, context.namespace, pod.metadata.name, tail)
    text, truncated = tail.redacted([client.token] if client.token else [])
    with contextlib.suppress(ApiError):
        await kube.patch(
            Job,
            name,
            {"metadata": {"annotations": {OUTPUT_READ_ANNOTATION: "true"}}},
            namespace=context.namespace,
        )
    if _succeeded(job) and exit_code in (0, None):
        log_progress(f"Job {name} succeeded")
        return CommandResult(name, 0, text, truncated)
    # The command's failure is the error users need; a refused store only adds to it.
    stored_error: str | None = None
    try:
        await store_step_output(client, context.hook_step_id, text, truncated)
    except styrmin.StyrminError as error:
        stored_error = error.message
    if _failure_reason(job).startswith("DeadlineExceeded"):
        message = (
            f"Job {name} did not end within {timeout:g} seconds, the timeout of its command "
            f"{shlex.join(argv)!r}; Kubernetes stopped it. Give execute_commands a longer timeout if it needs one."
        )
    elif exit_code is None:
        reason = why_not_run or _failure_reason(job)
        message = f"Job {name} failed before its command {shlex.join(argv)!r} ended: {reason}"
    else:
        message = f"Job {name} failed: its command {shlex.join(argv)!r} exited with code {exit_code}."
        last = next((line for line in reversed(text.splitlines()) if line.strip()), None)
        if last is not None:
            message += f" Its last line: {last[:300]}"
    if stored_error is not None:
        message += f" Its output could not be stored on the hook step: {stored_error}"
    elif text:
        message += " The end of its output is stored on the hook step."
    raise CommandFailed(
        message, job_name=name, exit_code=exit_code, output_tail=text, output_truncated=truncated
    )


async def _job_pod(kube: AsyncClient, namespace: str, job_name: str) -> Any:
    """The Job's pod (the newest, should there be several)."""
    selector: dict[str, Any] = {JOB_NAME_LABEL: job_name}
    pods: list[Any] = [pod async for pod in kube.list(Pod, namespace=namespace, labels=selector)]
    if not pods:
        return None
    return max(pods, key=lambda pod: str(pod.metadata.creationTimestamp or ""))


def _exit_code(pod: Any) -> tuple[int | None, str | None]:
    """The command's exit code, or None and why it did not run (its container's waiting reason)."""
    if pod is None:
        return None, "its pod is gone"
    for status in (pod.status.containerStatuses if pod.status else None) or []:
        if status.name != JOB_CONTAINER or status.state is None:
            continue
        if status.state.terminated is not None:
            return int(status.state.terminated.exitCode), None
        if status.state.waiting is not None:
            waiting = status.state.waiting
            return None, f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
    if pod.status and (pod.status.reason or pod.status.message):
        return None, " ".join(part for part in (pod.status.reason, pod.status.message) if part)
    return None, None


def _failure_reason(job: Any) -> str:
    for condition in (job.status.conditions if job.status else None) or []:
        if condition.type == "Failed" and condition.status == "True":
            return f"{condition.reason}: {condition.message}" if condition.message else str(condition.reason)
    return "Kubernetes gave no reason."


async def _read_log(kube: AsyncClient, namespace: str, pod: str, tail: OutputTail) -> None:
    """Stream the pod's log through ``tail``: memory stays bounded by the tail's size, whatever its length."""
    # lightkube's own log() reads the whole answer into memory when not following it; this streams
    # the same request's bytes instead.
    http: Any = kube._client
    request = http.build_adapter_request(
        http.prepare_request(
            "get", PodLog, name=pod, namespace=namespace, params={"container": JOB_CONTAINER}
        )
    )
    response = await http.send(request, stream=True)
    try:
        if response.is_error:
            await response.aread()
            http.raise_for_status(response)
        async for chunk in response.aiter_bytes(_LOG_CHUNK_BYTES):
            tail.feed(chunk)
    finally:
        await response.aclose()
