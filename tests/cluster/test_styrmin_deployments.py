"""The agent's writes of StyrminDeployments: a namespace deleted between two changes is made again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Namespace

from styrmin_backend.cluster import ClusterAccess
from styrmin_localcluster import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("localcluster"), []) as running:
        yield running


def _delete_namespace(cluster: LocalCluster, name: str) -> None:
    client = Client(KubeConfig.from_file(cluster.kubeconfig_path))
    client.delete(Namespace, name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client.get(Namespace, name)
        except ApiError as error:
            if error.status.code == 404:
                return
            raise
        time.sleep(0.1)
    raise AssertionError(f"namespace {name} was not deleted within 60 s")


def test_a_namespace_deleted_after_a_change_is_made_again_by_the_next(cluster: LocalCluster) -> None:
    async def write(access: ClusterAccess, revision: int) -> int | None:
        await access.ensure_namespace("gone")
        return await access.write_styrmin_deployment("gone", "shop", {"appVersion": "1.0.0"}, revision)

    async def scenario() -> int | None:
        access = ClusterAccess(cluster.kubeconfig_path)
        try:
            await access.ensure_crd()
            assert await write(access, 1) is None
            await asyncio.to_thread(_delete_namespace, cluster, "gone")
            written = await write(access, 2)
            assert await access.styrmin_deployment_revision("gone", "shop") == 2
            return written
        finally:
            await access.close()

    assert asyncio.run(scenario()) is None
