"""The agent in a pod: with no kubeconfig it reaches its cluster through the service account's folder
(token, ca.crt, namespace) and KUBERNETES_SERVICE_HOST/PORT, for lightkube, Helm and its actions alike."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from styrmin_backend.actions._kube import kube_client
from styrmin_backend.cluster import ClusterAccess, HelmReleases
from styrmin_backend.cluster.connection import SERVICE_ACCOUNT_ENV, ClusterConnection, NoClusterAccess
from styrmin_localcluster import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("localcluster"), []) as running:
        yield running


@pytest.fixture
def service_account(cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder laid out as Kubernetes mounts it in a pod, and the variables Kubernetes sets."""
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text((cluster.data_dir / "token").read_text().strip())
    shutil.copyfile(cluster.data_dir / "tls" / "ca.crt", folder / "ca.crt")
    (folder / "namespace").write_text("styrmin")
    url = urlsplit(cluster.url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(url.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(url.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config to fall back on
    return folder


def test_without_a_kubeconfig_the_agent_uses_the_service_account(service_account: Path) -> None:
    connection = ClusterConnection.find(None, service_account)
    assert connection.in_cluster
    assert "service account" in connection.describe()
    assert connection.action_env() == {SERVICE_ACCOUNT_ENV: str(service_account)}


def test_a_kubeconfig_given_wins_over_the_service_account(
    service_account: Path, cluster: LocalCluster
) -> None:
    connection = ClusterConnection.find(cluster.kubeconfig_path, service_account)
    assert not connection.in_cluster
    assert connection.action_env() == {"KUBECONFIG": str(cluster.kubeconfig_path)}


def test_no_kubeconfig_and_no_service_account_says_what_to_set(service_account: Path, tmp_path: Path) -> None:
    with pytest.raises(NoClusterAccess, match="STYRMIN_AGENT_KUBECONFIG"):
        ClusterConnection.find(None, tmp_path / "nothing-mounted")


async def test_the_cluster_and_helm_answer_through_the_service_account(
    service_account: Path, tmp_path: Path
) -> None:
    connection = ClusterConnection.find(None, service_account)
    cluster = ClusterAccess(connection)
    try:
        await cluster.ensure_crd()
        await cluster.ensure_namespace("in-cluster")
        assert await cluster.write_styrmin_deployment("in-cluster", "shop", {"appVersion": "1.0"}, 3) is None
        assert await cluster.styrmin_deployment_revision("in-cluster", "shop") == 3
    finally:
        await cluster.close()

    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: settings\nversion: 0.1.0\n")
    (chart / "templates" / "settings.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n"
        "data:\n  colour: {{ .Values.colour | quote }}\n"
    )
    releases = HelmReleases(connection)
    await releases.apply(chart, {"colour": "blue"}, "shop", "in-cluster", timeout=60)
    assert await releases.uninstall("shop", "in-cluster", timeout=60) is True


async def test_an_action_reaches_the_cluster_through_the_folder_the_agent_names(
    service_account: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightkube.resources.core_v1 import Namespace

    monkeypatch.setenv(SERVICE_ACCOUNT_ENV, str(service_account))
    kube = kube_client()
    names = [namespace.metadata.name async for namespace in kube.list(Namespace)]
    assert "default" in names
