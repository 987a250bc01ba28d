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
from styrmin_backend.cluster import helm as helm_releases
from styrmin_backend.cluster.connection import ClusterConnection
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


class _CountedConfig(helm.Config):
    """Helm's own Config, counted: how many an agent made."""

    made: list[str] = []

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        _CountedConfig.made.append(str(options.get("namespace")))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _CountedConfig.made = []
    monkeypatch.setattr(helm, "Config", _CountedConfig)
    return _CountedConfig.made


def test_operations_on_a_namespace_reuse_its_helm_config_until_one_fails(
    cluster: LocalCluster, counted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kept config skips Helm's discovery of the API on each operation; a failed one is not trusted.
    monkeypatch.setattr(helm_releases, "KEPT_CONFIGS", 2)
    releases = HelmReleases(cluster.kubeconfig_path)
    for namespace in ("kept-a", "kept-a", "kept-b", "kept-a"):
        assert asyncio.run(releases.apply(CHART, {}, "shop", namespace, TIMEOUT)) is None
    assert counted == ["kept-a", "kept-b"]

    asyncio.run(releases.apply(CHART, {}, "shop", "kept-c", TIMEOUT))  # a third: the least recent goes
    asyncio.run(releases.apply(CHART, {}, "shop", "kept-a", TIMEOUT))
    asyncio.run(releases.apply(CHART, {}, "shop", "kept-b", TIMEOUT))
    assert counted == ["kept-a", "kept-b", "kept-c", "kept-b"]

    never_ready = {"server": {"image": {"repository": "example.com/no/such/image"}}}
    with pytest.raises(helm.HelmError):
        asyncio.run(releases.apply(CHART, never_ready, "shop", "kept-a", 2))
    assert asyncio.run(releases.apply(CHART, {}, "shop", "kept-a", TIMEOUT)) is None
    assert counted == ["kept-a", "kept-b", "kept-c", "kept-b", "kept-a"]  # made again after the failure
    assert _history(cluster, "kept-a", "shop")[-1][1] == "deployed"
    releases.close()


def test_a_config_is_made_again_when_the_clusters_credentials_change(
    cluster: LocalCluster, counted: list[str], tmp_path: Path
) -> None:
    # As a rotated service-account token does: the next operation uses the new one.
    releases = HelmReleases(ClusterConnection(kubeconfig=cluster.kubeconfig_path))
    asyncio.run(releases.apply(CHART, {}, "shop", "rotated", TIMEOUT))
    rotated = tmp_path / "kubeconfig"
    rotated.write_text(cluster.kubeconfig_path.read_text())
    releases.connection = ClusterConnection(kubeconfig=rotated)
    asyncio.run(releases.apply(CHART, {"taskWorker": {"replicas": 0}}, "shop", "rotated", TIMEOUT))
    assert counted == ["rotated", "rotated"]
    assert _history(cluster, "rotated", "shop")[-1] == (2, "deployed")
