"""A stop or start sets replicas in place only when nothing else would change; otherwise Helm applies.

On the local cluster, with real Helm and the example driver's chart as the agent renders it. Each
refusal leaves the workload as it was, so that the Helm upgrade that follows does the whole change.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import helm_python as helm
import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.apps_v1 import Deployment, StatefulSet

from styrmin_backend.agent.adapters import KubeCluster
from styrmin_backend.cluster import ClusterAccess, ClusterError, HelmReleases, ReplicasChanged
from styrmin_backend.drivers import (
    DeploymentConfiguration,
    InstallChart,
    load_driver_spec,
    prepare_install_chart,
)
from styrmin_localcluster import LocalCluster
from tests.support.drivers import EXAMPLE_DRIVER

pytestmark = pytest.mark.slow

SPEC = load_driver_spec((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
TIMEOUT = 120
WORKER = "shop-task-worker"
CHECKSUM_KEY = bytes(32)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("localcluster"), [EXAMPLE_DRIVER / "catalog"]) as running:
        yield running


def _chart(namespace: str, stopped: list[str], values: dict[str, object] | None = None) -> InstallChart:
    return prepare_install_chart(
        EXAMPLE_DRIVER,
        SPEC,
        "shop",
        namespace,
        "1.0.0",
        DeploymentConfiguration(values=values or {}),
        stopped_components=stopped,
        checksum_key=CHECKSUM_KEY,
    )


def _revision(cluster: LocalCluster, namespace: str) -> int:
    config = helm.Config(kubeconfig_path=str(cluster.kubeconfig_path), namespace=namespace)
    try:
        return max(int(r["revision"]) for r in config.history("shop"))
    finally:
        config.close()


def _worker(cluster: LocalCluster, namespace: str) -> Deployment:
    """The example's task worker as the cluster holds it now."""
    return Client(KubeConfig.from_file(cluster.kubeconfig_path)).get(Deployment, WORKER, namespace=namespace)


def _replicas(cluster: LocalCluster, namespace: str) -> int:
    workload = _worker(cluster, namespace)
    assert workload.spec is not None and workload.spec.replicas is not None
    return workload.spec.replicas


def _ready(cluster: LocalCluster, namespace: str) -> tuple[int, int]:
    """The worker's ready replicas and all its replicas, as the cluster reports them now."""
    status = _worker(cluster, namespace).status
    assert status is not None
    return status.readyReplicas or 0, status.replicas or 0


@asynccontextmanager
async def _releases(cluster: LocalCluster, count: int = 1) -> AsyncIterator[tuple[HelmReleases, ...]]:
    """``count`` agents' Helm releases that may scale in place, sharing one cluster client."""
    access = ClusterAccess(cluster.kubeconfig_path)
    releases = tuple(HelmReleases(cluster.kubeconfig_path, cluster=access) for _ in range(count))
    try:
        yield releases
    finally:
        for each in releases:
            each.close()
        await access.close()


@asynccontextmanager
async def _installed(
    cluster: LocalCluster, namespace: str
) -> AsyncIterator[tuple[HelmReleases, ClusterAccess]]:
    """The example installed in ``namespace`` by one agent's releases, with their cluster client."""
    async with _releases(cluster) as (releases,):
        assert releases.cluster is not None
        await _apply(releases, _chart(namespace, []), namespace)
        yield releases, releases.cluster


async def _apply(releases: HelmReleases, chart: InstallChart, namespace: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        await releases.apply(
            chart.write(Path(folder) / "chart"),
            chart.values,
            "shop",
            namespace,
            TIMEOUT,
            digest=chart.digest,
            workloads=chart.workloads,
        )


async def _scale(releases: HelmReleases, chart: InstallChart, namespace: str) -> bool:
    return await releases.scale_in_place(chart.digest, chart.workloads, "shop", namespace)


def test_a_stop_and_a_start_set_the_replicas_in_place_and_helm_upgrades_after_them(
    cluster: LocalCluster,
) -> None:
    async def scenario() -> None:
        async with _releases(cluster) as (releases,):
            await _apply(releases, _chart("inplace", []), "inplace")
            installed = _revision(cluster, "inplace")
            assert await _scale(releases, _chart("inplace", ["task-worker"]), "inplace")
            assert (_replicas(cluster, "inplace"), _revision(cluster, "inplace")) == (0, installed)
            assert await _scale(releases, _chart("inplace", []), "inplace")
            assert (_replicas(cluster, "inplace"), _revision(cluster, "inplace")) == (1, installed)
            # Helm's own upgrades still change the replicas (no field conflict), and keep no memory of
            # the scale: the next stop after one is in place again.
            await _apply(releases, _chart("inplace", [], {"taskWorker": {"replicas": 3}}), "inplace")
            assert (_replicas(cluster, "inplace"), _revision(cluster, "inplace")) == (3, installed + 1)
            stop = _chart("inplace", ["task-worker"], {"taskWorker": {"replicas": 3}})
            assert await _scale(releases, stop, "inplace")
            assert _replicas(cluster, "inplace") == 0

    asyncio.run(scenario())


def test_anything_but_the_replicas_changing_leaves_it_to_helm(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        async with _releases(cluster) as (releases,):
            await _apply(releases, _chart("refused", []), "refused")
            # Another configuration: its other objects would not be applied.
            changed = _chart("refused", ["task-worker"], {"taskWorker": {"replicas": 2}})
            assert not await _scale(releases, changed, "refused")
            # A label someone else added is theirs: Helm's apply leaves it, and so does the scale.
            kube = Client(KubeConfig.from_file(cluster.kubeconfig_path))
            kube.patch(Deployment, WORKER, {"metadata": {"labels": {"team": "a"}}}, namespace="refused")
            assert await _scale(releases, _chart("refused", ["task-worker"]), "refused")
            scaled = kube.get(Deployment, WORKER, namespace="refused")
            assert scaled.metadata is not None and (scaled.metadata.labels or {})["team"] == "a"
            assert _replicas(cluster, "refused") == 0
            # A field Helm applied, changed by someone else since: not as Helm left it.
            image = {
                "spec": {"template": {"spec": {"containers": [{"name": "task-worker", "image": "x:2"}]}}}
            }
            kube.patch(Deployment, WORKER, image, namespace="refused")
            assert not await _scale(releases, _chart("refused", []), "refused")
            assert _replicas(cluster, "refused") == 0
            # Helm does the start then (forcing nothing: it takes back only what it may), and the
            # release is known again.
            kube.patch(
                Deployment,
                WORKER,
                {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {"name": "task-worker", "image": "example.com/shop/task-worker:1.0.0"}
                                ]
                            }
                        }
                    }
                },
                namespace="refused",
            )
            await _apply(releases, _chart("refused", []), "refused")
            assert _replicas(cluster, "refused") == 1
            assert await _scale(releases, _chart("refused", ["task-worker"]), "refused")
            assert _replicas(cluster, "refused") == 0
            # Replicas someone scaled behind Styrmin's back: another manager owns them (a conflict).
            Client(KubeConfig.from_file(cluster.kubeconfig_path)).patch(
                Deployment, WORKER, {"spec": {"replicas": 4}}, namespace="refused"
            )
            assert not await _scale(releases, _chart("refused", []), "refused")
            assert _replicas(cluster, "refused") == 4

    asyncio.run(scenario())


def test_a_release_this_process_did_not_apply_is_left_to_helm(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        without_cluster = HelmReleases(cluster.kubeconfig_path)
        async with _releases(cluster, 2) as (first, other):
            try:
                await _apply(first, _chart("elsewhere", []), "elsewhere")
                await _apply(without_cluster, _chart("elsewhere", []), "elsewhere")
                stop = _chart("elsewhere", ["task-worker"])
                assert not await _scale(without_cluster, stop, "elsewhere")  # no client to scale with
                assert not await _scale(other, stop, "elsewhere")  # another agent's: applied by Helm
                # Another agent applied another configuration since this one applied it: the workload
                # carries that release's digest, and the dry run shows the difference.
                await _apply(other, _chart("elsewhere", [], {"taskWorker": {"replicas": 2}}), "elsewhere")
                assert not await _scale(first, stop, "elsewhere")
                assert _replicas(cluster, "elsewhere") == 2
            finally:
                without_cluster.close()

    asyncio.run(scenario())


STATEFUL_SPEC = """\
apiVersion: styrmin.io/v1
kind: Driver
metadata:
  name: queue
  version: 1.0.0
spec:
  application:
    name: Queue
    defaultVersion: "1.0.0"
  chart:
    path: chart
  components:
    - name: broker
      workload:
        kind: StatefulSet
        name: "{{ .Release.Name }}-broker"
"""

STATEFUL_CHART = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}-broker
spec:
  serviceName: {{ .Release.Name }}-broker
  replicas: 2
  selector:
    matchLabels: {app: broker}
  template:
    metadata:
      labels: {app: broker}
    spec:
      containers:
        - name: broker
          image: "example.com/shop/task-worker:{{ .Chart.AppVersion }}"  # in the example's catalog
"""


def test_a_statefulset_is_stopped_and_started_in_place_too(cluster: LocalCluster, tmp_path: Path) -> None:
    package = tmp_path / "queue"
    (package / "chart" / "templates").mkdir(parents=True)
    (package / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: queue\nversion: 0.1.0\n")
    (package / "chart" / "templates" / "broker.yaml").write_text(STATEFUL_CHART)
    spec = load_driver_spec(STATEFUL_SPEC)

    def chart(stopped: list[str]) -> InstallChart:
        return prepare_install_chart(
            package,
            spec,
            "queue",
            "stateful",
            "1.0.0",
            DeploymentConfiguration(),
            stopped_components=stopped,
            checksum_key=CHECKSUM_KEY,
        )

    def replicas() -> int:
        kube = Client(KubeConfig.from_file(cluster.kubeconfig_path))
        broker = kube.get(StatefulSet, "queue-broker", namespace="stateful")
        assert broker.spec is not None and broker.spec.replicas is not None
        return broker.spec.replicas

    async def scenario() -> None:
        async with _releases(cluster) as (releases,):
            installed = chart([])
            await releases.apply(
                installed.write(tmp_path / "installed"),
                installed.values,
                "queue",
                "stateful",
                TIMEOUT,
                digest=installed.digest,
                workloads=installed.workloads,
            )
            stop = chart(["broker"])
            assert await releases.scale_in_place(stop.digest, stop.workloads, "queue", "stateful")
            assert replicas() == 0
            start = chart([])
            assert await releases.scale_in_place(start.digest, start.workloads, "queue", "stateful")
            assert replicas() == 2

    asyncio.run(scenario())


def test_the_wait_after_a_scale_ends_when_the_replicas_are_ready_and_not_before(
    cluster: LocalCluster,
) -> None:
    async def scenario() -> None:
        async with _installed(cluster, "waited") as (releases, access):
            assert await _scale(releases, _chart("waited", ["task-worker"]), "waited")
            await access.wait_scaled("waited", "Deployment", WORKER, 0, TIMEOUT)
            assert _ready(cluster, "waited") == (0, 0)
            assert await _scale(releases, _chart("waited", []), "waited")
            await access.wait_scaled("waited", "Deployment", WORKER, 1, TIMEOUT)
            assert _ready(cluster, "waited") == (1, 1)

    asyncio.run(scenario())


def test_the_wait_fails_at_once_when_scaled_to_others_and_names_a_workload_never_ready(
    cluster: LocalCluster,
) -> None:
    async def scenario() -> None:
        async with _installed(cluster, "unready") as (_, access):
            kube = Client(KubeConfig.from_file(cluster.kubeconfig_path))
            missing = {
                "spec": {
                    "replicas": 2,
                    "template": {
                        "spec": {"containers": [{"name": "task-worker", "image": "example.com/missing:1"}]}
                    },
                }
            }
            kube.patch(Deployment, WORKER, missing, namespace="unready")
            with pytest.raises(ClusterError, match=r"did not reach 2 ready replicas within 2 s"):
                await access.wait_scaled("unready", "Deployment", WORKER, 2, 2)
            # Someone scales it while the wait runs: the wait could never end, and says so.
            waiting = asyncio.create_task(access.wait_scaled("unready", "Deployment", WORKER, 2, TIMEOUT))
            await asyncio.sleep(0.5)
            assert not waiting.done()
            kube.patch(Deployment, WORKER, {"spec": {"replicas": 5}}, namespace="unready")
            with pytest.raises(ReplicasChanged, match="now asks for 5 replicas, not 2") as changed:
                await waiting
            assert changed.value.replicas == 5

    asyncio.run(scenario())


def test_a_deployments_workloads_are_listed_by_its_label_in_its_own_namespace(cluster: LocalCluster) -> None:
    """What a task's end reports: one listing per kind, which finds the deployment's component
    workloads as they are, and nothing of a release of the same name in another namespace."""

    async def scenario() -> None:
        async with _installed(cluster, "listed-a") as (releases, access):
            await _apply(releases, _chart("listed-b", ["task-worker"]), "listed-b")
            views = await KubeCluster(access).deployment_workloads("listed-b", "shop", ["Deployment"])
            assert {key.name: view.replicas for key, view in views.items()} == {
                "shop-server": 1,
                WORKER: 0,
            }
            assert {key.namespace for key in views} == {"listed-b"}
            assert await KubeCluster(access).deployment_workloads("listed-a", "other", ["Deployment"]) == {}

    asyncio.run(scenario())


def test_the_wait_after_a_scale_starts_from_the_scales_answer_and_a_later_one_reads_again(
    cluster: LocalCluster,
) -> None:
    """The cluster's answer to the scale is where the wait starts (then watched from its version):
    no read of the workload. Only once: a later wait, or one for other replicas, reads it."""

    async def scenario() -> list[int]:
        async with _installed(cluster, "answered") as (releases, access):
            reads = []
            real_get = access._client.get

            async def counted_get(*args: object, **kwargs: object) -> object:
                reads.append(1)
                return await real_get(*args, **kwargs)  # type: ignore[arg-type]

            access._client.get = counted_get  # type: ignore[method-assign]
            counts = []
            assert await _scale(releases, _chart("answered", ["task-worker"]), "answered")
            before = len(reads)  # the scale reads the live workload first, to compare with it
            await access.wait_scaled("answered", "Deployment", WORKER, 0, TIMEOUT)
            counts.append(len(reads) - before)
            before = len(reads)
            await access.wait_scaled("answered", "Deployment", WORKER, 0, TIMEOUT)  # no scale since
            counts.append(len(reads) - before)
            assert await _scale(releases, _chart("answered", []), "answered")
            before = len(reads)
            with pytest.raises(ReplicasChanged):  # waits for 2 where the scale asked 1: read, and told
                await access.wait_scaled("answered", "Deployment", WORKER, 2, TIMEOUT)
            counts.append(len(reads) - before)
            await access.wait_scaled("answered", "Deployment", WORKER, 1, TIMEOUT)
            assert _ready(cluster, "answered") == (1, 1)
            return counts

    assert asyncio.run(scenario()) == [0, 1, 1]
