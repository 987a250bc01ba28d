"""Fixtures: one local cluster per test session (a subprocess on loopback) and a namespace per test."""

from __future__ import annotations

import base64
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from styrmin_localcluster import LocalCluster

CATALOG = Path(__file__).parent / "catalog"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("localcluster"), [CATALOG]) as running:
        yield running


@pytest.fixture(scope="session")
def client(cluster: LocalCluster) -> Iterator[Client]:
    kube = Client(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="tests")
    yield kube
    kube.close()


@pytest.fixture
def namespace(client: Client) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.create(Namespace(metadata=ObjectMeta(name=name)))
    yield name
    client.delete(Namespace, name)


def http_client(kubeconfig: Path) -> httpx.Client:
    """A plain HTTP client with a kubeconfig's address, CA and token, for requests lightkube cannot make."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    token = config["users"][0]["user"]["token"]
    return httpx.Client(
        base_url=cluster["server"], verify=context, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


@pytest.fixture(scope="session")
def http(cluster: LocalCluster) -> Iterator[httpx.Client]:
    with http_client(cluster.kubeconfig_path) as session:
        yield session
