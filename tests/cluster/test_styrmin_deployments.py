"""The agent's writes of StyrminDeployments: a namespace deleted between two changes is made again,
and a later revision in the cluster stays, whoever wrote last."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Namespace

from styrmin_backend.cluster import ClusterAccess
from styrmin_localcluster import LocalCluster
from tests.support.kubectl import run_kubectl

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


def test_a_later_revision_another_agent_wrote_stays_though_this_agent_wrote_last_before(
    cluster: LocalCluster,
) -> None:
    """The agent that wrote revision 1 writes revision 2 after another agent wrote revision 3: the
    cluster keeps 3, and the write says so (the earlier change's workflow then runs its hooks only)."""

    async def scenario() -> tuple[int | None, int | None, int | None, int | None]:
        first, other = ClusterAccess(cluster.kubeconfig_path), ClusterAccess(cluster.kubeconfig_path)
        try:
            await first.ensure_crd()
            await first.ensure_namespace("race")
            one = await first.write_styrmin_deployment("race", "shop", {"appVersion": "1.0.0"}, 1)
            three = await other.write_styrmin_deployment("race", "shop", {"appVersion": "3.0.0"}, 3)
            two = await first.write_styrmin_deployment("race", "shop", {"appVersion": "2.0.0"}, 2)
            return one, three, two, await other.styrmin_deployment_revision("race", "shop")
        finally:
            await first.close()
            await other.close()

    assert asyncio.run(scenario()) == (None, None, 3, 3)


def test_an_agent_writes_its_own_later_revisions_one_after_another(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    async def scenario() -> list[int | None]:
        access = ClusterAccess(cluster.kubeconfig_path)
        try:
            await access.ensure_crd()
            await access.ensure_namespace("own")
            return [
                await access.write_styrmin_deployment("own", "shop", {"appVersion": f"{r}.0.0"}, r)
                for r in (1, 2, 3)
            ]
        finally:
            await access.close()

    assert asyncio.run(scenario()) == [None, None, None]
    shown = run_kubectl(
        cluster.kubeconfig_path,
        tmp_path,
        "own",
        "get",
        "styrmindeployments",
        "shop",
        "-o",
        "jsonpath={.spec.revision} {.spec.appVersion}",
    )
    assert shown.stdout == "3 3.0.0"
