"""Helm releases of deployments, through helm-python-sdk (Helm's own Go SDK): kubeconfig or service account."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm

from styrmin_backend.cluster.connection import ClusterConnection
from styrmin_backend.cluster.kube import ClusterAccess

DEFAULT_MAX_HISTORY = 10
"""Revisions of a release an upgrade keeps, as the Helm CLI's ``--history-max`` does by default.

Helm reads and decodes every stored revision of a release on each upgrade (to find the last one):
without a cap, each upgrade of a deployment gets slower than the one before."""

KEPT_CONFIGS = 16
"""Namespaces whose Helm ``Config`` is kept between operations, most recently used first.

A kept config skips Helm's discovery of the cluster's API (``/version``, ``/api``, ``/apis``, ...):
about 10 of the 35 requests of an upgrade of the example chart, 20-25 ms of its 110 ms."""

QPS = 200.0
BURST = 400
"""The client-side request rate of a kept config. client-go allows 5 requests per second after a burst
of 100 (Helm's defaults), which a new config per operation never used up: an upgrade makes about 25
requests, and a kept config that upgrades a few times in a row would wait ~1.5 s per upgrade. The
API server's own priority and fairness still applies."""


@dataclass
class _Applied:
    """What this process last applied to a release with Helm, and what it has scaled in place since."""

    digest: str
    replicas: dict[tuple[str, str], int]
    """(kind, name) of each component workload -> the replicas it was last applied with."""


def _identity(workload: dict[str, Any]) -> tuple[str, str]:
    return str(workload.get("kind")), str((workload.get("metadata") or {}).get("name"))


def _replicas_of(workloads: Sequence[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(kind, name) of each workload manifest -> the replicas it sets (1 when it sets none)."""
    return {_identity(w): int((w.get("spec") or {}).get("replicas", 1)) for w in workloads}


@dataclass
class _KeptConfig:
    """A namespace's config, the options it was made with, and how many operations use it now."""

    config: helm.Config
    options: dict[str, Any]
    users: int = 0
    stale: bool = False


class HelmReleases:
    """Install, upgrade and uninstall the release of each deployment in one cluster.

    Args:
        connection: the cluster's kubeconfig or service account.
        max_history: revisions each upgrade keeps of a release (Helm's ``--history-max``); 0: all.
        cluster: the cluster's client, to scale component workloads in place (``scale_in_place``);
            None: every write is a Helm operation.
    """

    def __init__(
        self,
        connection: ClusterConnection | Path,
        max_history: int = DEFAULT_MAX_HISTORY,
        cluster: ClusterAccess | None = None,
    ) -> None:
        if isinstance(connection, Path):
            connection = ClusterConnection(kubeconfig=connection)
        self.connection = connection
        self.max_history = max_history
        self.cluster = cluster
        self._applied: dict[str, _Applied] = {}
        """Per release: the last Helm write of this process that succeeded (none while one runs)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._kept: OrderedDict[str, _KeptConfig] = OrderedDict()
        self._kept_lock = threading.Lock()

    @contextmanager
    def _config(self, namespace: str) -> Iterator[helm.Config]:
        """The namespace's kept config, or a new one (kept after): made again when the connection's
        options changed (a rotated token), and after an operation that failed (its view of the
        cluster's API may be out of date). At most ``KEPT_CONFIGS`` are kept while unused."""
        options = self.connection.helm_options()
        with self._kept_lock:
            kept = self._kept.get(namespace)
            if kept is None or kept.options != options or kept.stale:
                if kept is not None:
                    self._let_go(namespace, kept)
                kept = _KeptConfig(
                    helm.Config(**options, namespace=namespace, qps=QPS, burst_limit=BURST), options
                )
                self._kept[namespace] = kept
            self._kept.move_to_end(namespace)
            kept.users += 1
        try:
            yield kept.config
        except BaseException:
            kept.stale = True
            raise
        finally:
            with self._kept_lock:
                kept.users -= 1
                if self._kept.get(namespace) is not kept and kept.users == 0:
                    kept.config.close()  # replaced while in use
                unused = [ns for ns, k in self._kept.items() if k.users == 0]
                for evicted in unused[: max(0, len(self._kept) - KEPT_CONFIGS)]:
                    self._let_go(evicted, self._kept[evicted])

    def _let_go(self, namespace: str, kept: _KeptConfig) -> None:
        """Stop keeping a config; closed now when unused, else by its last user. Under ``_kept_lock``."""
        del self._kept[namespace]
        if kept.users == 0:
            kept.config.close()

    def close(self) -> None:
        """Close the kept configs (those in use are closed by their last user)."""
        with self._kept_lock:
            for namespace, kept in list(self._kept.items()):
                self._let_go(namespace, kept)

    def _lock(self, namespace: str, release: str) -> asyncio.Lock:
        # Helm corrupts a release's history when two writes to it overlap: one at a time per release.
        return self._locks.setdefault(f"{namespace}/{release}", asyncio.Lock())

    async def apply(
        self,
        chart: Path,
        values: dict[str, Any],
        release: str,
        namespace: str,
        timeout: int,
        *,
        digest: str | None = None,
        workloads: Sequence[dict[str, Any]] = (),
    ) -> str | None:
        """Install the release, or upgrade it when it exists, and wait until its workloads are ready.

        ``digest`` and ``workloads``: the chart's release digest and its component workloads'
        manifests, kept once applied for ``scale_in_place``.

        Returns what was done first to a release that an unfinished operation left pending (its agent
        stopped mid-way), for the step's notes; None when there was nothing to undo.
        """
        key = f"{namespace}/{release}"
        async with self._lock(namespace, release):
            self._applied.pop(key, None)  # a write that fails half-way leaves the release unknown
            recovered = await asyncio.to_thread(self._apply, chart, values, release, namespace, timeout)
            if digest:
                self._applied[key] = _Applied(digest, _replicas_of(workloads))
            return recovered

    async def scale_in_place(
        self, digest: str, workloads: Sequence[dict[str, Any]], release: str, namespace: str
    ) -> bool:
        """Set the replicas of a release's component workloads without a Helm upgrade, when the
        chart (``digest``, its component workloads' manifests) is the release this process last
        applied but for them, and each workload is live as Helm applied it (``domain.scale_in_place``).

        A Helm upgrade here would write a revision and apply every object again to change replicas
        alone: about 0.2 s, against a few ms. False when it cannot (then apply the chart): a release
        applied elsewhere or not yet by this process, another configuration, or a workload not as
        Helm left it. Workloads scaled before one that could not be are applied again by Helm then.
        """
        key = f"{namespace}/{release}"
        async with self._lock(namespace, release):
            applied = self._applied.get(key)
            wanted = _replicas_of(workloads)
            if self.cluster is None or applied is None or applied.digest != digest:
                return False
            if set(wanted) != set(applied.replicas):
                return False
            for workload in workloads:
                identity = _identity(workload)
                if wanted[identity] == applied.replicas[identity]:
                    continue
                if not await self.cluster.scale_as_helm(namespace, release, workload):
                    return False
                applied.replicas[identity] = wanted[identity]
            return True

    def _apply(
        self, chart: Path, values: dict[str, Any], release: str, namespace: str, timeout: int
    ) -> str | None:
        with self._config(namespace) as config:
            # The usual case costs one call: the upgrade itself. Only when Helm refuses it (no such
            # release, or one left pending) does a status read (~20 ms) say which, and what to do.
            try:
                self._upgrade(config, chart, values, release, namespace, timeout)
                return None
            except helm.HelmError:
                current = self._status(config, release)
                if current is not None and not _is_pending(current):
                    raise  # it exists and was not pending: the upgrade itself failed
            recovered, exists = self._recover_pending(config, release, current, timeout)
            if exists:
                self._upgrade(config, chart, values, release, namespace, timeout)
            else:
                config.install(
                    chart,
                    release,
                    values,
                    namespace=namespace,
                    timeout=timeout,
                    wait="watcher",
                    create_namespace=True,
                )
            return recovered

    def _upgrade(
        self,
        config: helm.Config,
        chart: Path,
        values: dict[str, Any],
        release: str,
        namespace: str,
        timeout: int,
    ) -> None:
        config.upgrade(
            chart,
            release,
            values,
            namespace=namespace,
            timeout=timeout,
            wait="watcher",
            max_history=self.max_history,
        )

    @staticmethod
    def _status(config: helm.Config, release: str) -> dict[str, Any] | None:
        """The release's status, or None when there is no such release (one call: ~20 ms)."""
        try:
            return config.status(release)
        except helm.HelmNotFoundError:
            return None

    @staticmethod
    def _recover_pending(
        config: helm.Config, release: str, current: dict[str, Any] | None, timeout: int
    ) -> tuple[str | None, bool]:
        """Undo an operation on the release that never finished, so that Helm accepts the next one.

        Helm refuses every write while a release is pending ("another operation is in progress"). A
        deployment's changes run one at a time and each agent writes a release under a lock, so a
        pending release is one whose agent stopped during the write: roll it back to its last
        deployed revision, or uninstall a release that never got deployed.

        Returns what was done (None when nothing), and whether the release exists afterwards.
        """
        if current is None:
            return None, False
        if not _is_pending(current):
            return None, True
        status = str(current.get("status", ""))
        revision = current.get("revision")
        deployed = [r for r in config.history(release) if r.get("status") in ("deployed", "superseded")]
        if deployed:
            target = max(int(r["revision"]) for r in deployed)
            config.rollback(release, version=target, timeout=timeout, wait="watcher")
            return (
                f"Release {release} was left {status} at revision {revision} by a write that never "
                f"finished (its agent stopped); rolled back to revision {target} first."
            ), True
        config.uninstall(release, timeout=timeout, wait="watcher")
        return (
            f"Release {release} was left {status} at revision {revision} by a write that never finished "
            "(its agent stopped) and was never deployed; uninstalled it first."
        ), False

    @classmethod
    def _exists(cls, config: helm.Config, release: str) -> bool:
        return cls._status(config, release) is not None

    async def uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        """Uninstall the release and wait for its resources to go; False when there was none."""
        async with self._lock(namespace, release):
            self._applied.pop(f"{namespace}/{release}", None)
            return await asyncio.to_thread(self._uninstall, release, namespace, timeout)

    def _uninstall(self, release: str, namespace: str, timeout: int) -> bool:
        with self._config(namespace) as config:
            if not self._exists(config, release):
                return False
            config.uninstall(release, timeout=timeout, wait="watcher")
            return True


def _is_pending(status: dict[str, Any]) -> bool:
    """Whether a release's status is one Helm gives a write in progress (pending-install, -upgrade, ...)."""
    return str(status.get("status", "")).startswith("pending")
