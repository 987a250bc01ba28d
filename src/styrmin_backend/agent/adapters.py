"""The real adapters of the agent's ports: lightkube, Helm, the SDK and the backup storage locations."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import styrmin
from styrmin_backend.agent.backup_storage import BackupFolder, BackupStorage, S3Storage, storage_for
from styrmin_backend.agent.ports import (
    ChartRequest,
    ContainerView,
    LinkedTask,
    PreparedChart,
    WorkloadKey,
    WorkloadView,
)
from styrmin_backend.cluster import ClusterAccess, HelmReleases
from styrmin_backend.domain.secret_checksum import decode_checksum_key
from styrmin_backend.drivers import InstallChart, prepare_install_chart
from styrmin_backend.drivers.render import REPLICAS_ANNOTATION, has_secret_env_vars, new_checksum_key
from styrmin_backend.drivers.workloads import CHECKSUM_KEY_ENTRY, DEPLOYMENT_LABEL, env_secret_name

LINKED_TASK_POLL_SECONDS = 0.5


def _workload_view(workload: Any) -> WorkloadView:
    """A Deployment or StatefulSet as the agent reads it."""
    pod = workload.spec.template.spec if workload.spec else None
    annotations = (workload.metadata.annotations or {}) if workload.metadata else {}
    configured = annotations.get(REPLICAS_ANNOTATION)
    status = workload.status
    return WorkloadView(
        replicas=int(workload.spec.replicas or 0) if workload.spec else 0,
        ready_replicas=int((status.readyReplicas if status else 0) or 0),
        containers=tuple(ContainerView(c.name, c.image or "") for c in (pod.containers if pod else [])),
        configured_replicas=int(configured) if configured is not None else None,
    )


class KubeCluster:
    """The cluster port over :class:`ClusterAccess` (lightkube), workloads read as :class:`WorkloadView`."""

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access

    def action_env(self) -> dict[str, str]:
        return self.access.connection.action_env()

    async def ensure_namespace(self, namespace: str) -> None:
        await self.access.ensure_namespace(namespace)

    async def write_styrmin_deployment(
        self, namespace: str, name: str, spec: dict[str, Any], revision: int
    ) -> int | None:
        return await self.access.write_styrmin_deployment(namespace, name, spec, revision)

    async def styrmin_deployment_revision(self, namespace: str, name: str) -> int | None:
        return await self.access.styrmin_deployment_revision(namespace, name)

    async def delete_styrmin_deployment(self, namespace: str, name: str) -> None:
        await self.access.delete_styrmin_deployment(namespace, name)

    async def workload(self, namespace: str, kind: str, name: str) -> WorkloadView:
        return _workload_view(await self.access.workload(namespace, kind, name))

    async def component_workloads(self, kinds: Collection[str]) -> dict[WorkloadKey, WorkloadView]:
        return await self._labelled(kinds, "*", None)

    async def deployment_workloads(
        self, namespace: str, deployment: str, kinds: Collection[str]
    ) -> dict[WorkloadKey, WorkloadView]:
        return await self._labelled(kinds, namespace, deployment)

    async def _labelled(
        self, kinds: Collection[str], namespace: str, deployment: str | None
    ) -> dict[WorkloadKey, WorkloadView]:
        found: dict[WorkloadKey, WorkloadView] = {}
        for kind in kinds:
            listed = await self.access.labelled_workloads(
                kind, DEPLOYMENT_LABEL, namespace=namespace, value=deployment
            )
            for workload in listed:
                metadata = workload.metadata
                if metadata is not None and metadata.namespace and metadata.name:
                    found[WorkloadKey(metadata.namespace, kind, metadata.name)] = _workload_view(workload)
        return found

    async def wait_scaled(self, namespace: str, kind: str, name: str, replicas: int, timeout: float) -> None:
        await self.access.wait_scaled(namespace, kind, name, replicas, timeout)

    async def write_secret(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> None:
        await self.access.write_secret(namespace, name, data, labels)


@dataclass
class RenderedChart:
    """A chart rendered, in memory: written to a scratch folder only for a Helm install or upgrade."""

    chart: InstallChart

    def configured_replicas(self) -> dict[tuple[str, str], int]:
        return {
            (workload["kind"], workload["metadata"]["name"]): int(
                workload["metadata"]["annotations"][REPLICAS_ANNOTATION]
            )
            for workload in self.chart.workloads
        }

    async def discard(self) -> None:
        pass  # nothing held: the folder a Helm upgrade loads is gone once it is applied


class HelmCharts:
    """The Helm port: the chart rendered with the deployment's configuration, then Helm's writes.

    The secret env checksums are keyed with the key the deployment's env Secret holds in the cluster
    (a new one when it holds none), as a chart keeps a generated password with ``lookup``: any agent
    renders the same checksums for the same values, and only who may read the Secret knows the key.
    """

    def __init__(self, releases: HelmReleases, cluster: ClusterAccess) -> None:
        self.releases = releases
        self.cluster = cluster

    async def _checksum_key(self, request: ChartRequest) -> bytes:
        if not has_secret_env_vars(request.configuration):
            return new_checksum_key()  # no checksum to key, and no env Secret to keep it in
        held = await self.cluster.read_secret_if_present(request.namespace, env_secret_name(request.release))
        return decode_checksum_key((held or {}).get(CHECKSUM_KEY_ENTRY)) or new_checksum_key()

    async def prepare(self, request: ChartRequest) -> PreparedChart:
        checksum_key = await self._checksum_key(request)

        def render() -> InstallChart:
            return prepare_install_chart(
                request.driver_dir,
                request.spec,
                request.release,
                request.namespace,
                request.app_version,
                request.configuration,
                is_upgrade=request.is_upgrade,
                stopped_components=request.stopped_components,
                checksum_key=checksum_key,
            )

        # In a thread: rendering would hold up the agent's other tasks.
        return RenderedChart(await asyncio.to_thread(render))

    async def apply(
        self, chart: PreparedChart, release: str, namespace: str, timeout: int, *, replicas_only: bool = False
    ) -> str | None:
        assert isinstance(chart, RenderedChart)
        rendered = chart.chart
        if replicas_only and await self.releases.scale_in_place(
            rendered.digest, rendered.workloads, release, namespace
        ):
            return None
        scratch = tempfile.TemporaryDirectory(prefix="styrmin-chart-")
        try:
            folder = await asyncio.to_thread(rendered.write, Path(scratch.name) / "chart")
            return await self.releases.apply(
                folder,
                rendered.values,
                release,
                namespace,
                timeout,
                digest=rendered.digest,
                workloads=rendered.workloads,
            )
        finally:
            await asyncio.to_thread(scratch.cleanup)

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        return await self.releases.uninstall(release, namespace, timeout)

    async def settled(self, *, with_end: bool = False) -> bool:
        return False  # nothing runs in the background


class SdkLinkedChanges:
    """Linked changes through the Python SDK, as the reconciliation's actions' token."""

    async def upgrade_and_wait(
        self,
        url: str,
        token: str,
        deployment: str,
        *,
        app_version: str,
        driver_version: str,
        started_by_step: int,
    ) -> LinkedTask | None:
        async with styrmin.AsyncClient(url=url, token=token) as client:
            change = await client.deployments.upgrade(
                deployment,
                app_version=app_version,
                driver_version=driver_version,
                started_by_step=started_by_step,
            )
            if change.task is None:
                return None
            task = await client.tasks.wait(change.task.id, interval=LINKED_TASK_POLL_SECONDS)
        return LinkedTask(
            task.id, task.status in (styrmin.TaskStatus.FAILED, styrmin.TaskStatus.CANCELLED), task.error
        )


class StorageLocations:
    """The backup storage port: the agent's own folder, another folder, or a bucket whose keys are
    read from the cluster's Secret."""

    def __init__(self, default: BackupFolder, cluster: ClusterAccess | None) -> None:
        self.default = default
        self.cluster = cluster

    async def open(self, location: dict[str, Any] | None) -> BackupStorage:
        return await storage_for(location, self.default, self.cluster)

    def job_secret(self, storage: BackupStorage) -> dict[str, str] | None:
        return storage.job_credentials() if isinstance(storage, S3Storage) else None
