"""The agent's composition root: its real adapters, put together once behind the reconciliation's ports."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from styrmin_backend.agent.adapters import HelmCharts, KubeCluster, SdkLinkedChanges, StorageLocations
from styrmin_backend.agent.backup_storage import BackupFolder
from styrmin_backend.agent.drivers_cache import DriverCache
from styrmin_backend.agent.helm_lock import LockedHelmReleases
from styrmin_backend.agent.ports import Ports
from styrmin_backend.agent.prefect import ActionRunner
from styrmin_backend.agent.prefect.health import PrefectWatch
from styrmin_backend.agent.prefect_cancel import CancelFromPrefect
from styrmin_backend.agent.server_api import ServerApi
from styrmin_backend.cluster import ClusterAccess, HelmReleases
from styrmin_backend.cluster.connection import ClusterConnection
from styrmin_backend.protocol import ClaimedHelmLock


@dataclass(frozen=True)
class AgentParts:
    """What every reconciliation of one agent shares: the real parts, and the ports over them."""

    api: ServerApi
    cluster: ClusterAccess
    runner: ActionRunner
    prefect: PrefectWatch
    ports: Ports


def build_parts(
    api: ServerApi,
    cluster: ClusterAccess,
    connection: ClusterConnection,
    runner: ActionRunner,
    prefect: PrefectWatch,
    data_dir: Path,
    backup_dir: Path | None,
    helm_max_history: int,
) -> AgentParts:
    """The agent's parts: Styrmin's API, the cluster and Helm, the action runner, the drivers it
    fetched and the backup storage, each behind its port."""
    ports = Ports(
        server=api,
        cluster=KubeCluster(cluster),
        helm=HelmCharts(HelmReleases(connection, helm_max_history, cluster), cluster),
        runner=runner,
        drivers=DriverCache(api, data_dir / "drivers"),
        linked=SdkLinkedChanges(),
        prefect=prefect,
        backup_storage=StorageLocations(BackupFolder(backup_dir or data_dir / "backups"), cluster),
    )
    return AgentParts(api, cluster, runner, prefect, ports)


def ports_of_task(
    parts: AgentParts,
    task_id: int,
    lease_seconds: int,
    stop_reconciliation: Callable[[], None],
    helm_lock: ClaimedHelmLock | None = None,
) -> Ports:
    """The ports of task ``task_id``: each Helm operation under its deployment's Helm lock (the one
    ``helm_lock`` the claim took, first), and a flow run cancelled from the Prefect UI cancelling the
    task (``stop_reconciliation`` stops it here)."""
    return dataclasses.replace(
        parts.ports,
        helm=LockedHelmReleases(parts.ports.helm, parts.api, task_id, lease_seconds, helm_lock),
        runner=CancelFromPrefect(parts.runner, parts.api, task_id, stop_reconciliation),
    )
