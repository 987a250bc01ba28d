"""How the primitives reach the deployment's cluster in the agent: lightkube, with the agent's kubeconfig."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx2 as httpx
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.core.decoders import decode_list
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod, PodLog, Secret
from lightkube.types import CascadeType

from styrmin_backend.actions._backend import ActionJob, JobPod
from styrmin_backend.actions._jobs import JOB_CONTAINER, JOB_NAME_LABEL, OUTPUT_READ_ANNOTATION
from styrmin_backend.actions._tail import OutputTail
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.cluster.connection import SERVICE_ACCOUNT_ENV

FIELD_MANAGER = "styrmin-actions"

_WORKLOADS: dict[str, Any] = {"Deployment": Deployment, "StatefulSet": StatefulSet}
_LOG_CHUNK_BYTES = 64 * 1024

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncClient]] = (
    weakref.WeakKeyDictionary()
)
"""One client per event loop and kubeconfig, shared by the primitives an action calls in a row."""


_prepared: dict[tuple[str, int, int], AsyncClient] = {}
"""A client made ahead for a kubeconfig file (its path, size and modification time), by the fork
server: each action's process, forked from it, takes it instead of reading the file and making the
client's TLS settings (about 13 ms of an action's CPU)."""


def prepare_kube_client() -> None:
    """Make, ahead of any action, the client of the kubeconfig in KUBECONFIG (the agent's own)."""
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not path or os.environ.get(SERVICE_ACCOUNT_ENV):
        return  # a service account's token is read fresh by each action: it rotates
    with contextlib.suppress(Exception):  # each action then reads it, and says what is wrong
        _prepared[_kubeconfig_key(path)] = AsyncClient(
            KubeConfig.from_file(path), field_manager=FIELD_MANAGER
        )


def _kubeconfig_key(path: str) -> tuple[str, int, int]:
    stat = os.stat(path)
    return path, stat.st_size, stat.st_mtime_ns


def kube_client() -> AsyncClient:
    """A client of the cluster: KUBECONFIG or STYRMIN_SERVICE_ACCOUNT_DIR (the agent sets one for its
    actions), else the usual in-cluster config."""
    path = os.environ.get("KUBECONFIG", "")
    service_account = os.environ.get(SERVICE_ACCOUNT_ENV, "")
    key = path or f"service-account:{service_account}"
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    if key not in per_loop and path and not service_account and _prepared:
        with contextlib.suppress(OSError):  # the file is gone: reading it below says so
            prepared = _prepared.pop(_kubeconfig_key(path.split(os.pathsep)[0]), None)
            if prepared is not None:  # made from this very file: this process's only loop takes it
                per_loop[key] = prepared
    if key not in per_loop:
        try:
            if path:
                config = KubeConfig.from_file(path.split(os.pathsep)[0])
            elif service_account:
                config = KubeConfig.from_service_account(service_account)
            else:
                config = KubeConfig.from_env()
        except Exception as error:
            raise ActionError(
                f"The action cannot reach the cluster: no usable kubeconfig ({error}). Styrmin's agent "
                "passes its kubeconfig in KUBECONFIG; outside the agent, set KUBECONFIG."
            ) from None
        per_loop[key] = AsyncClient(config, field_manager=FIELD_MANAGER)
    return per_loop[key]


def prepare_decoders() -> None:
    """Build lightkube's decoders of the resources the primitives read, before any action needs them.

    lightkube's models are msgspec structs: the first decode of a resource resolves the type hints of
    every model it nests, about 25 ms for a Deployment, a Job and a Pod list, then keeps them on the
    classes. Decoding an empty list of each builds them all. The fork server calls this once, so each
    action's process, forked from it, starts with them built.
    """
    for resource in (*_WORKLOADS.values(), Job, Pod, Secret):
        decode_list(b'{"items": []}', resource)


@contextmanager
def _kube_errors() -> Iterator[None]:
    try:
        yield
    except ApiError as error:
        raise ActionError(f"The cluster refused a request of the action: {error.status.message}") from None
    except httpx.TransportError as error:
        raise ActionError(f"The action cannot reach the cluster: {error}") from None


def _condition(job: Any, kind: str) -> bool:
    conditions = (job.status.conditions if job.status else None) or []
    return any(c.type == kind and c.status == "True" for c in conditions)


def _failure_reason(job: Any) -> str:
    for condition in (job.status.conditions if job.status else None) or []:
        if condition.type == "Failed" and condition.status == "True":
            return f"{condition.reason}: {condition.message}" if condition.message else str(condition.reason)
    return ""


def action_job(job: Any) -> ActionJob:
    """The facts the primitives read from a lightkube Job."""
    complete, failed = _condition(job, "Complete"), _condition(job, "Failed")
    return ActionJob(
        name=str(job.metadata.name),
        labels=dict(job.metadata.labels or {}),
        annotations=dict(job.metadata.annotations or {}),
        ended=complete or failed,
        succeeded=complete,
        failure_reason=_failure_reason(job),
        resource_version=job.metadata.resourceVersion,
    )


def _job_pod(pod: Any) -> JobPod:
    """The command's exit code, or None and why it did not run (its container's waiting reason)."""
    if pod is None:
        return JobPod(None, None, "its pod is gone")
    name = str(pod.metadata.name)
    for status in (pod.status.containerStatuses if pod.status else None) or []:
        if status.name != JOB_CONTAINER or status.state is None:
            continue
        if status.state.terminated is not None:
            return JobPod(name, int(status.state.terminated.exitCode))
        if status.state.waiting is not None:
            waiting = status.state.waiting
            return JobPod(
                name, None, f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
            )
    if pod.status and (pod.status.reason or pod.status.message):
        return JobPod(name, None, " ".join(part for part in (pod.status.reason, pod.status.message) if part))
    return JobPod(name, None)


class LightkubeCluster:
    """The cluster of KUBECONFIG (else the in-cluster service account), through lightkube."""

    @property
    def _kube(self) -> AsyncClient:
        return kube_client()

    async def pod_template(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        with _kube_errors():
            try:
                workload = await self._kube.get(_WORKLOADS[kind], name, namespace=namespace)
            except ApiError as error:
                if error.status.code == 404:
                    return None
                raise
        template: dict[str, Any] = (workload.to_dict().get("spec") or {}).get("template") or {}
        return template

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        with _kube_errors():
            try:
                secret = await self._kube.get(Secret, name, namespace=namespace)
            except ApiError as error:
                if error.status.code == 404:
                    return None
                raise
        return {
            key: base64.b64decode(value).decode("utf-8", "replace")
            for key, value in (secret.data or {}).items()
        }

    async def list_action_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[ActionJob]:
        with _kube_errors():
            return [
                action_job(job)
                async for job in self._kube.list(Job, namespace=namespace, labels=dict(labels))
            ]

    async def create_job(self, manifest: dict[str, Any]) -> str | None:
        with _kube_errors():
            try:
                created: Any = await self._kube.create(Job.from_dict(manifest))
            except ApiError as error:
                if error.status.code == 409:
                    return None
                raise
        return str(created.metadata.resourceVersion)

    async def delete_job(self, namespace: str, name: str) -> bool:
        with _kube_errors():
            try:
                await self._kube.delete(Job, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
            except ApiError as error:
                if error.status.code == 404:
                    return False
                raise
        return True

    async def wait_for_job_end(self, namespace: str, name: str, resource_version: str | None) -> ActionJob:
        """Followed with a watch, read again whenever the watch stops."""
        kube = self._kube
        while True:
            with contextlib.suppress(ApiError):
                async for _, event_job in kube.watch(
                    Job,
                    namespace=namespace,
                    fields={"metadata.name": name},
                    resource_version=resource_version,
                ):
                    followed = action_job(event_job)
                    if followed.ended:
                        return followed
                    resource_version = followed.resource_version
            with _kube_errors():
                job = action_job(await kube.get(Job, name, namespace=namespace))
            if job.ended:
                return job
            resource_version = job.resource_version
            await asyncio.sleep(0.2)

    async def job_pod(self, namespace: str, job_name: str) -> JobPod:
        """The newest pod of the Job, should there be several."""
        selector: dict[str, Any] = {JOB_NAME_LABEL: job_name}
        with _kube_errors():
            pods: list[Any] = [
                pod async for pod in self._kube.list(Pod, namespace=namespace, labels=selector)
            ]
        newest = max(pods, key=lambda pod: str(pod.metadata.creationTimestamp or "")) if pods else None
        return _job_pod(newest)

    async def read_job_log(self, namespace: str, pod: str, tail: OutputTail) -> None:
        """Stream the log: memory stays bounded by the tail's size, whatever its length."""
        # lightkube's own log() reads the whole answer into memory when not following it; this streams
        # the same request's bytes instead.
        http: Any = self._kube._client
        request = http.build_adapter_request(
            http.prepare_request(
                "get", PodLog, name=pod, namespace=namespace, params={"container": JOB_CONTAINER}
            )
        )
        with _kube_errors():
            response = await http.send(request, stream=True)
            try:
                if response.is_error:
                    await response.aread()
                    http.raise_for_status(response)
                async for chunk in response.aiter_bytes(_LOG_CHUNK_BYTES):
                    tail.feed(chunk)
            finally:
                await response.aclose()

    async def mark_job_output_read(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiError):
            await self._kube.patch(
                Job,
                name,
                {"metadata": {"annotations": {OUTPUT_READ_ANNOTATION: "true"}}},
                namespace=namespace,
            )
