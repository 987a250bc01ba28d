"""A release that an agent left pending (killed during a Helm write) does not block the next change."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import helm_python as helm
import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Secret

from styrmin_backend.cluster import HelmReleases
from styrmin_localcluster import LocalCluster
from tests.support.kubectl import KUBECTL, run_kubectl

pytestmark = pytest.mark.slow

CHART = Path(__file__).resolve().parents[2] / "examples" / "drivers" / "shop" / "chart"
CATALOG = CHART.parent / "catalog"
TIMEOUT = 120


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("localcluster"), [CATALOG]) as running:
        yield running


def _leave_pending(cluster: LocalCluster, namespace: str, release: str, revision: int, status: str) -> None:
    """Mark a stored revision as Helm marks a write in progress, as a killed agent leaves it."""
    client = Client(KubeConfig.from_file(cluster.kubeconfig_path))
    name = f"sh.helm.release.v1.{release}.v{revision}"
    secret = client.get(Secret, name, namespace=namespace)
    assert secret.data is not None
    stored = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret.data["release"]))))
    stored["info"]["status"] = status
    encoded = base64.b64encode(gzip.compress(json.dumps(stored).encode())).decode()
    patch = {
        "metadata": {"labels": {"status": status}},
        "data": {"release": base64.b64encode(encoded.encode()).decode()},
    }
    client.patch(Secret, name, patch, namespace=namespace)


def _history(cluster: LocalCluster, namespace: str, release: str) -> list[tuple[int, str]]:
    config = helm.Config(kubeconfig_path=str(cluster.kubeconfig_path), namespace=namespace)
    try:
        return [(int(r["revision"]), str(r["status"])) for r in config.history(release)]
    finally:
        config.close()


def test_an_upgrade_left_pending_is_rolled_back_and_the_next_change_applies(cluster: LocalCluster) -> None:
    releases = HelmReleases(cluster.kubeconfig_path)
    assert asyncio.run(releases.apply(CHART, {}, "shop", "pending-up", TIMEOUT)) is None
    assert (
        asyncio.run(releases.apply(CHART, {"taskWorker": {"replicas": 0}}, "shop", "pending-up", TIMEOUT))
        is None
    )
    _leave_pending(cluster, "pending-up", "shop", 2, "pending-upgrade")

    note = asyncio.run(releases.apply(CHART, {"taskWorker": {"replicas": 1}}, "shop", "pending-up", TIMEOUT))

    assert note is not None and "pending-upgrade at revision 2" in note and "revision 1" in note, note
    history = _history(cluster, "pending-up", "shop")
    assert history[-1][1] == "deployed", history
    assert [status for _, status in history].count("deployed") == 1, history


def test_an_install_left_pending_is_removed_and_installed_again(cluster: LocalCluster) -> None:
    releases = HelmReleases(cluster.kubeconfig_path)
    assert asyncio.run(releases.apply(CHART, {}, "shop", "pending-in", TIMEOUT)) is None
    _leave_pending(cluster, "pending-in", "shop", 1, "pending-install")

    note = asyncio.run(releases.apply(CHART, {}, "shop", "pending-in", TIMEOUT))

    assert note is not None and "never deployed" in note, note
    assert _history(cluster, "pending-in", "shop") == [(1, "deployed")]


def _stored_revisions(cluster: LocalCluster, home: Path, namespace: str, release: str) -> list[str]:
    """The names of the Secrets in which Helm keeps the release's revisions, as kubectl lists them."""
    listed = run_kubectl(
        cluster.kubeconfig_path,
        home,
        namespace,
        *("get", "secrets", "-l", f"owner=helm,name={release}", "-o", "jsonpath={.items[*].metadata.name}"),
    )
    return sorted(listed.stdout.split())


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_upgrades_keep_the_last_revisions_only_as_helms_history_max_does(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    releases = HelmReleases(cluster.kubeconfig_path, max_history=3)
    for replicas in (1, 0, 1, 0, 1, 0):
        asyncio.run(releases.apply(CHART, {"taskWorker": {"replicas": replicas}}, "shop", "capped", TIMEOUT))

    assert _history(cluster, "capped", "shop") == [(4, "superseded"), (5, "superseded"), (6, "deployed")]
    assert _stored_revisions(cluster, tmp_path, "capped", "shop") == [
        f"sh.helm.release.v1.shop.v{n}" for n in (4, 5, 6)
    ]


def test_the_default_keeps_ten_revisions_as_the_helm_cli_does(cluster: LocalCluster) -> None:
    releases = HelmReleases(cluster.kubeconfig_path)
    for index in range(12):
        asyncio.run(
            releases.apply(CHART, {"taskWorker": {"replicas": index % 2}}, "shop", "default", TIMEOUT)
        )

    assert [revision for revision, _ in _history(cluster, "default", "shop")] == list(range(3, 13))
