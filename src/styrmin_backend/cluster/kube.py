"""The agent's Kubernetes client: StyrminDeployments, namespaces and component workloads."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.operators import exists
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Namespace, Secret
from lightkube.types import PatchType

from styrmin_backend.cluster.connection import ClusterConnection
from styrmin_backend.domain.deployments import later_revision_wins
from styrmin_backend.domain.scale_in_place import as_helm_applies, helm_manager, only_replicas_differ

log = logging.getLogger("styrmin.agent")

FIELD_MANAGER = "styrmin-agent"
GROUP = "styrmin.io"
StyrminDeployment = create_namespaced_resource(GROUP, "v1", "StyrminDeployment", "styrmindeployments")

_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"styrmindeployments.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": "styrmindeployments",
            "singular": "styrmindeployment",
            "kind": "StyrminDeployment",
            "shortNames": ["sdep"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                                "properties": {"revision": {"type": "integer"}},
                            }
                        },
                    }
                },
                "additionalPrinterColumns": [
                    {"name": "Revision", "type": "integer", "jsonPath": ".spec.revision"},
                    {"name": "App version", "type": "string", "jsonPath": ".spec.appVersion"},
                    {"name": "Driver", "type": "string", "jsonPath": ".spec.driverVersion"},
                ],
            }
        ],
    },
}

_WORKLOADS: dict[str, Any] = {"Deployment": Deployment, "StatefulSet": StatefulSet}


class ClusterError(Exception):
    """A cluster operation failed; the message says which object and why."""


class _SecretMissing(ClusterError):
    """A Secret read is not there."""


class ReplicasChanged(ClusterError):
    """A workload waited for was scaled to other replicas meanwhile: the wait could never end."""

    def __init__(self, message: str, replicas: int) -> None:
        super().__init__(message)
        self.replicas = replicas


_WATCH_SECONDS = 30.0

_JUST_SCALED_SECONDS = 10.0
"""How long after a scale its answer may start the wait for it (``ClusterAccess._scaled_just_now``)."""
"""How long one watch of a workload waited for runs before it is read again (a missed event's cost)."""


def _scaled(workload: Any, kind: str, namespace: str, name: str, replicas: int) -> bool:
    """Whether ``workload`` has exactly ``replicas`` ready (for 0: none left); raises ReplicasChanged
    when it asks for other replicas now."""
    asked = workload.spec.replicas if workload.spec and workload.spec.replicas is not None else 1
    if asked != replicas:
        raise ReplicasChanged(
            f"{kind} {namespace}/{name} now asks for {asked} replicas, not {replicas}.", asked
        )
    status = workload.status
    ready = (status.readyReplicas or 0) if status else 0
    total = (status.replicas or 0) if status else 0
    return (replicas == 0 and total == 0) or (replicas > 0 and ready >= replicas and total == replicas)


def _styrmin_deployment(
    namespace: str, name: str, spec: dict[str, Any], revision: int, resource_version: str | None
) -> Any:
    """The StyrminDeployment of a deployment at ``revision``; replacing it requires ``resource_version``."""
    return StyrminDeployment(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            labels={"app.kubernetes.io/managed-by": "styrmin"},
            resourceVersion=resource_version,
        ),
        spec={**spec, "revision": revision},
    )


class ClusterAccess:
    """One cluster, reached through a kubeconfig or the pod's service account, as the agent uses it."""

    def __init__(self, connection: ClusterConnection | Path) -> None:
        if isinstance(connection, Path):
            connection = ClusterConnection(kubeconfig=connection)
        self.connection = connection
        self._client = AsyncClient(connection.lightkube_config(), field_manager=FIELD_MANAGER)
        self._namespaces: set[str] = set()
        """Namespaces this client made sure of: each change of a deployment need not ask again."""
        self._written: dict[tuple[str, str], tuple[str, int]] = {}
        """(namespace, name) of each StyrminDeployment this client wrote -> the resourceVersion and
        revision it wrote: a later revision replaces it without reading it first, and the cluster
        refuses that write (409) when anyone wrote it since (see :meth:`write_styrmin_deployment`)."""
        self._just_scaled: dict[tuple[str, str, str], tuple[float, Any]] = {}
        """(namespace, kind, name) of a workload this client scaled in place -> when, and the
        cluster's answer: where the wait for it starts (:meth:`_scaled_just_now`)."""

    async def close(self) -> None:
        """Close the client's connections."""
        await self._client.close()

    async def ensure_crd(self) -> None:
        """Install the StyrminDeployment CRD (server-side apply: safe to repeat)."""
        crd = CustomResourceDefinition.from_dict(_CRD)
        await self._client.apply(crd, force=True)  # type: ignore[call-overload]

    async def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` unless it exists (asked once per namespace; a write into a namespace
        deleted since then makes it again: see :meth:`write_styrmin_deployment`)."""
        if namespace in self._namespaces:
            return
        try:
            await self._client.create(Namespace(metadata=ObjectMeta(name=namespace)))
        except ApiError as error:
            if error.status.code != 409:
                raise ClusterError(
                    f"Could not create namespace {namespace}: {error.status.message}"
                ) from error
        self._namespaces.add(namespace)

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """The decoded data of Secret ``namespace/name``; raises ClusterError naming it when unreadable."""
        try:
            secret = await self._client.get(Secret, name, namespace=namespace)
        except ApiError as error:
            kind = _SecretMissing if error.status.code == 404 else ClusterError
            raise kind(f"Could not read Secret {namespace}/{name}: {error.status.message}") from None
        return {
            key: base64.b64decode(value).decode("utf-8", "replace")
            for key, value in (secret.data or {}).items()
        }

    async def read_secret_if_present(self, namespace: str, name: str) -> dict[str, str] | None:
        """Like :meth:`read_secret`, but None when the Secret (or its namespace) is not there."""
        try:
            return await self.read_secret(namespace, name)
        except _SecretMissing:
            return None

    async def write_secret(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> None:
        """Create or replace Secret ``namespace/name`` with ``data`` (server-side apply)."""
        secret = Secret(
            metadata=ObjectMeta(name=name, namespace=namespace, labels=labels),
            type="Opaque",
            stringData=data,
        )
        try:
            await self._client.apply(secret, force=True)  # type: ignore[call-overload]
        except ApiError as error:
            raise ClusterError(f"Could not write Secret {namespace}/{name}: {error.status.message}") from None

    async def write_styrmin_deployment(
        self, namespace: str, name: str, spec: dict[str, Any], revision: int
    ) -> int | None:
        """Write a deployment's desired configuration at ``revision``, unless the cluster holds a later one.

        When this client wrote the object last with an earlier revision, it is replaced at the version
        written then, unread: the cluster accepts that only if nobody wrote it since, which is the
        usual case (one read less per task); otherwise it is read and decided on as below.

        Returns:
            None when written; the cluster's revision when it is later (the object is left unchanged).
        """
        key = (namespace, name)
        written = self._written.pop(key, None)
        if written is not None and written[1] < revision:
            try:
                stored = await self._client.replace(
                    _styrmin_deployment(namespace, name, spec, revision, written[0])
                )
                self._remember(key, stored, revision)
                return None
            except ApiError as error:
                if error.status.code not in (404, 409):  # deleted or written since: read and decide
                    raise
        for _attempt in range(5):
            try:
                current = await self._client.get(StyrminDeployment, name, namespace=namespace)
            except ApiError as error:
                if error.status.code != 404:
                    raise
                current = None
            if current is not None:
                held = int((current.get("spec") or {}).get("revision", 0))
                if later_revision_wins(held, revision):
                    return held
            body = _styrmin_deployment(
                namespace,
                name,
                spec,
                revision,
                current.metadata.resourceVersion if current and current.metadata else None,
            )
            try:
                stored = await (self._client.create(body) if current is None else self._client.replace(body))
                self._remember(key, stored, revision)
                return None
            except ApiError as error:
                if error.status.code == 404 and current is None and namespace in self._namespaces:
                    # Its namespace may have been deleted since this client made sure of it: once more.
                    self._namespaces.discard(namespace)
                    await self.ensure_namespace(namespace)
                    continue
                if error.status.code != 409:  # someone else wrote it in between: read and decide again
                    raise
        raise ClusterError(f"StyrminDeployment {namespace}/{name} kept changing under the agent; try again.")

    def _remember(self, key: tuple[str, str], stored: Any, revision: int) -> None:
        version = stored.metadata.resourceVersion if stored.metadata else None
        if version:
            self._written[key] = (version, revision)

    async def styrmin_deployment_revision(self, namespace: str, name: str) -> int | None:
        """The revision the cluster holds for a deployment, or None when it holds none."""
        try:
            current = await self._client.get(StyrminDeployment, name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        return int((current.get("spec") or {}).get("revision", 0))

    async def delete_styrmin_deployment(self, namespace: str, name: str) -> None:
        """Remove a deployment's StyrminDeployment (no error when it is gone already)."""
        self._written.pop((namespace, name), None)
        try:
            await self._client.delete(StyrminDeployment, name, namespace=namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise

    async def workload(self, namespace: str, kind: str, name: str) -> Any:
        """The Deployment or StatefulSet ``name``; raises ClusterError when it is missing."""
        try:
            return await self._client.get(_WORKLOADS[kind], name, namespace=namespace)
        except ApiError as error:
            raise ClusterError(
                f"{kind} {namespace}/{name} could not be read: {error.status.message}"
            ) from error

    async def labelled_workloads(
        self, kind: str, label: str, *, namespace: str = "*", value: str | None = None
    ) -> list[Any]:
        """Every Deployment or StatefulSet that carries ``label`` (at ``value``, when given), in
        ``namespace`` (every one by default): one listing, where reading each costs a request.
        Raises ClusterError when the cluster refuses it (a service account that may not list across
        namespaces, say)."""
        try:
            return [
                found
                async for found in self._client.list(
                    _WORKLOADS[kind],
                    namespace=namespace,
                    labels={label: value if value is not None else exists()},
                )
            ]
        except ApiError as error:
            raise ClusterError(
                f"{kind}s labelled {label} could not be listed: {error.status.message}"
            ) from error

    async def scale_as_helm(self, namespace: str, release: str, manifest: dict[str, Any]) -> bool:
        """Apply a component workload's manifest as Helm applies it, under Helm's field manager, when
        that changes nothing of the live workload but its replicas (``domain.scale_in_place``).

        False, with nothing changed, when it would change more, when Helm did not apply it
        server-side, when another manager owns its replicas (a conflict), or when the cluster
        refuses any of it: Helm applies it then, and says what is wrong, if anything is.
        """
        kind, name = manifest.get("kind"), (manifest.get("metadata") or {}).get("name")
        resource = _WORKLOADS.get(str(kind))
        if resource is None or not name:
            return False
        namespace = (manifest.get("metadata") or {}).get("namespace") or namespace
        try:
            live = (await self._client.get(resource, name, namespace=namespace)).to_dict()
            manager = helm_manager(live)
            if manager is None:
                return False
            body = as_helm_applies(manifest, release, namespace)

            async def apply(dry_run: bool) -> Any:
                return await self._client.patch(
                    resource,
                    name,
                    body,
                    namespace=namespace,
                    patch_type=PatchType.APPLY,
                    field_manager=manager,
                    force=False,
                    dry_run=dry_run,
                )

            if not only_replicas_differ(live, (await apply(dry_run=True)).to_dict()):
                return False
            self._just_scaled[(namespace, str(kind), name)] = (time.monotonic(), await apply(dry_run=False))
        except ApiError as error:
            log.info("%s %s/%s is applied by Helm, not scaled in place: %s", kind, namespace, name, error)
            return False
        return True

    def _scaled_just_now(self, namespace: str, kind: str, name: str, replicas: int) -> Any:
        """The workload as the cluster answered this process's scale of it to ``replicas`` a moment
        ago (``scale_as_helm``), once; None when there is none that recent, or it was for other
        replicas. The wait that follows a scale starts from it, and watches from its version, so it
        misses nothing a read would have shown: one read fewer per stop or start."""
        scaled = self._just_scaled.pop((namespace, kind, name), None)
        if scaled is None or time.monotonic() - scaled[0] > _JUST_SCALED_SECONDS:
            return None
        workload = scaled[1]
        asked = workload.spec.replicas if workload.spec and workload.spec.replicas is not None else 1
        return workload if asked == replicas else None

    async def wait_scaled(self, namespace: str, kind: str, name: str, replicas: int, timeout: float) -> None:
        """Wait until a workload has exactly ``replicas`` ready (and, for 0, no replicas left).

        Followed with a watch from the version read first, as Helm's ``--wait`` follows it: a replica
        that gets ready is seen at once, not at the next poll. A watch that ends or fails (the
        version expired, say) is followed by a read and a new watch.

        Raises:
            ReplicasChanged: at once, when the workload now asks for other replicas (another change
                scaled it), since it would never get there.
            ClusterError: it did not get there within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        workload = self._scaled_just_now(namespace, kind, name, replicas) or await self.workload(
            namespace, kind, name
        )
        while not _scaled(workload, kind, namespace, name, replicas):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = workload.status
                raise ClusterError(
                    f"{kind} {namespace}/{name} did not reach {replicas} ready replicas within {timeout:.0f} s "
                    f"({(status.readyReplicas or 0) if status else 0} ready of "
                    f"{(status.replicas or 0) if status else 0}); look at its pods."
                )
            version = workload.metadata.resourceVersion if workload.metadata else None
            with contextlib.suppress(ApiError, TimeoutError):
                async with asyncio.timeout(min(remaining, _WATCH_SECONDS)):
                    async for event, watched in self._client.watch(
                        _WORKLOADS[kind],
                        namespace=namespace,
                        fields={"metadata.name": name},
                        resource_version=version,
                    ):
                        if event == "DELETED":
                            break
                        if _scaled(watched, kind, namespace, name, replicas):
                            return
            workload = await self.workload(namespace, kind, name)
