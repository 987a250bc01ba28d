"""A real Helm (helm-python-sdk, Helm's Go SDK) installs, upgrades, rolls back and uninstalls with wait."""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import pytest
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret, Service

from styrmin_localcluster import LocalCluster

CHART = Path(__file__).parent / "charts" / "shop"
pytestmark = pytest.mark.slow


@pytest.fixture
def helm_config(cluster: LocalCluster, namespace: str) -> helm.Config:
    with helm.Config(kubeconfig_path=cluster.kubeconfig_path, namespace=namespace) as config:
        yield config


def _image_of(client: Client, namespace: str, name: str) -> str:
    deployment = client.get(Deployment, name, namespace=namespace)
    return deployment.spec.template.spec.containers[0].image


def test_helm_install_upgrade_rollback_and_uninstall_with_wait(
    helm_config: helm.Config, client: Client, namespace: str
) -> None:
    release = helm_config.install(CHART, "shop", {"replicas": 2}, wait="watcher", timeout=60)
    assert release["status"] == "deployed"
    deployment = client.get(Deployment, "shop", namespace=namespace)
    # Helm's wait returned only once the rollout was complete.
    assert deployment.status.availableReplicas == 2 and deployment.status.updatedReplicas == 2
    assert client.get(StatefulSet, "shop-db", namespace=namespace).status.readyReplicas == 1
    assert client.get(Job, "shop-migrate-1", namespace=namespace).status.succeeded == 1
    releases = [s for s in client.list(Secret, namespace=namespace, labels={"owner": "helm"})]
    assert [s.metadata.name for s in releases] == ["sh.helm.release.v1.shop.v1"]

    release = helm_config.upgrade(
        CHART,
        "shop",
        {"replicas": 3, "image": "registry.local:5000/shop/server:2.0", "message": "upgraded"},
        wait="watcher",
        timeout=60,
    )
    assert release["revision"] == 2
    deployment = client.get(Deployment, "shop", namespace=namespace)
    assert deployment.status.availableReplicas == 3 and deployment.status.updatedReplicas == 3
    assert deployment.status.replicas == 3
    assert _image_of(client, namespace, "shop") == "registry.local:5000/shop/server:2.0"
    assert client.get(ConfigMap, "shop-config", namespace=namespace).data == {"message": "upgraded"}
    assert client.get(Job, "shop-migrate-2", namespace=namespace).status.succeeded == 1

    helm_config.rollback("shop", version=1, wait="watcher", timeout=60)
    assert [(h["revision"], h["status"]) for h in helm_config.history("shop")] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]
    deployment = client.get(Deployment, "shop", namespace=namespace)
    assert _image_of(client, namespace, "shop") == "registry.local:5000/shop/server:1.0"
    assert deployment.status.availableReplicas == 2 and deployment.status.replicas == 2

    helm_config.uninstall("shop", wait="watcher", timeout=60)
    assert not list(client.list(Deployment, namespace=namespace))
    assert not [s for s in client.list(Service, namespace=namespace)]
    assert not list(client.list(Pod, namespace=namespace, labels={"app": "shop"}))
    assert not list(client.list(Secret, namespace=namespace, labels={"owner": "helm"}))


def test_helm_wait_fails_when_an_image_is_missing_from_the_catalog(
    helm_config: helm.Config, client: Client, namespace: str
) -> None:
    with pytest.raises(helm.HelmError) as raised:
        helm_config.install(
            CHART, "broken", {"image": "example.com/missing/server:1"}, wait="watcher", timeout=3
        )
    assert "resource Deployment/" in str(raised.value) and "/broken not ready" in str(raised.value)
    pods = list(client.list(Pod, namespace=namespace, labels={"app": "broken"}))
    assert pods and all(p.status.containerStatuses[0].state.waiting.reason == "ErrImagePull" for p in pods)
