"""The secret env checksum on a component's pod template, as the agent applies it to the local cluster.

Keyed with the key the deployment's env Secret holds: whoever may only read the workload cannot test
guesses of a secret value against it, and any agent (one restarted, another one) applying the same
values renders the same checksum, so nothing rolls out that did not change.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Secret

from styrmin_backend.agent.adapters import HelmCharts
from styrmin_backend.agent.ports import ChartRequest
from styrmin_backend.cluster import ClusterAccess, HelmReleases
from styrmin_backend.drivers import DeploymentConfiguration, load_driver_spec
from styrmin_backend.drivers.render import SECRET_CHECKSUM_ANNOTATION
from styrmin_backend.drivers.workloads import CHECKSUM_KEY_ENTRY, env_secret_name
from styrmin_localcluster import LocalCluster
from tests.support.drivers import EXAMPLE_DRIVER

pytestmark = pytest.mark.slow

SPEC = load_driver_spec((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
TIMEOUT = 120
PASSWORD = "hunter2-0042"
_namespaces = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("localcluster"), [EXAMPLE_DRIVER / "catalog"]) as running:
        yield running


async def _apply(helm: HelmCharts, namespace: str, env: dict[str, str], *, is_upgrade: bool) -> None:
    """Render and apply the example driver's chart as the agent's reconciliation does."""
    request = ChartRequest(
        driver_dir=EXAMPLE_DRIVER,
        spec=SPEC,
        release="shop",
        namespace=namespace,
        app_version="1.0.0",
        configuration=DeploymentConfiguration(env={"server": env}),
        is_upgrade=is_upgrade,
    )
    chart = await helm.prepare(request)
    try:
        await helm.apply(chart, "shop", namespace, TIMEOUT)
    finally:
        await chart.discard()


def _server(cluster: LocalCluster, namespace: str) -> Any:
    return Client(KubeConfig.from_file(cluster.kubeconfig_path)).get(
        Deployment, "shop-server", namespace=namespace
    )


def _checksum(workload: Any) -> str:
    checksum: str = workload.spec.template.metadata.annotations[SECRET_CHECKSUM_ANNOTATION]
    return checksum


def test_the_workload_carries_a_keyed_checksum_that_another_agent_renders_again(
    cluster: LocalCluster,
) -> None:
    namespace = f"checksum-{next(_namespaces)}"
    env = {"API_TOKEN": PASSWORD, "LOG_LEVEL": "debug"}

    async def scenario() -> None:
        access = ClusterAccess(cluster.kubeconfig_path)
        # Two agents' Helm ports (one restarted, or another one): nothing of the key in their memory.
        first, second = (
            HelmCharts(HelmReleases(cluster.kubeconfig_path, cluster=access), access) for _ in "12"
        )
        try:
            await access.ensure_namespace(namespace)
            await _apply(first, namespace, env, is_upgrade=False)
            installed = _server(cluster, namespace)
            checksum = _checksum(installed)
            # Not the plain digest of the secret env vars, against which guesses could be tested.
            plain = json.dumps(sorted({"API_TOKEN": PASSWORD}.items())).encode()
            assert checksum != hashlib.sha256(plain).hexdigest()[:16]
            secret = Client(KubeConfig.from_file(cluster.kubeconfig_path)).get(
                Secret, env_secret_name("shop"), namespace=namespace
            )
            assert secret.data is not None
            assert len(bytes.fromhex(base64.b64decode(secret.data[CHECKSUM_KEY_ENTRY]).decode())) == 32

            # The same values through the other agent: the same checksum, and no rollout.
            await _apply(second, namespace, env, is_upgrade=True)
            again = _server(cluster, namespace)
            assert _checksum(again) == checksum
            assert again.metadata.generation == installed.metadata.generation

            # A new value rolls the workload out; going back to the old one gives the old checksum.
            await _apply(second, namespace, {**env, "API_TOKEN": PASSWORD + "-new"}, is_upgrade=True)
            rotated = _server(cluster, namespace)
            assert _checksum(rotated) != checksum
            assert rotated.metadata.generation > installed.metadata.generation
            await _apply(first, namespace, env, is_upgrade=True)
            assert _checksum(_server(cluster, namespace)) == checksum
        finally:
            for helm in (first, second):
                helm.releases.close()
            await access.close()

    asyncio.run(scenario())
