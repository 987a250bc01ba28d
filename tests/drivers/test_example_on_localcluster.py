"""The example driver runs on the embedded local cluster: Helm installs its install chart, the pods run,
and a migration Job with the server's image at a version changes the shared database."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from lightkube import Client, KubeConfig
from lightkube.models.batch_v1 import JobSpec
from lightkube.models.core_v1 import Container, EnvVar, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

from styrmin_backend.drivers import DeploymentConfiguration, load_driver_spec, prepare_install_chart
from styrmin_localcluster import LocalCluster
from tests.drivers.conftest import EXAMPLE_DRIVER

pytestmark = pytest.mark.slow

SPEC = load_driver_spec((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
KEY = bytes(32)
"""The secret env checksum key of every render: none of them has a secret env var."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("shop-cluster"), [EXAMPLE_DRIVER / "catalog"]) as running:
        yield running


def _wait_for(predicate: Any, timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def _migration_succeeds(client: Client, namespace: str, image: str, env: list[EnvVar]) -> tuple[bool, str]:
    """Run ``shop migrate`` as a Job; whether it succeeded, and its log."""
    name = f"migrate-{uuid.uuid4().hex[:6]}"
    job = Job(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=JobSpec(
            backoffLimit=0,
            template=PodTemplateSpec(
                spec=PodSpec(
                    restartPolicy="Never",
                    containers=[Container(name="migrate", image=image, command=["shop", "migrate"], env=env)],
                )
            ),
        ),
    )
    client.create(job)
    status = _wait_for(
        lambda: (lambda s: s if s.succeeded or s.failed else None)(
            client.get(Job, name, namespace=namespace).status
        ),
        60,
        f"Job {name}",
    )
    pods = list(client.list(Pod, namespace=namespace, labels={"job-name": name}))
    log = "".join(client.log(pods[0].metadata.name, namespace=namespace)) if pods else "(no pod)"
    return bool(status.succeeded), log


def _schema_version(cluster: LocalCluster, database: str) -> str:
    with sqlite3.connect(cluster.data_dir / "data" / database) as connection:
        return str(connection.execute("SELECT version FROM schema").fetchone()[0])


def test_example_installs_runs_and_migrates_on_the_local_cluster(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    namespace = f"shop-{uuid.uuid4().hex[:6]}"
    configuration = DeploymentConfiguration(env={"server": {"LOG_LEVEL": "debug"}})
    client = Client(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="tests")
    with helm.Config(kubeconfig_path=cluster.kubeconfig_path, namespace=namespace) as config:
        install = prepare_install_chart(
            EXAMPLE_DRIVER, SPEC, "shop", namespace, "1.0.0", configuration, checksum_key=KEY
        )
        config.install(
            str(install.write(tmp_path / "v1")),
            "shop",
            install.values,
            namespace=namespace,
            create_namespace=True,
            wait="watcher",
            timeout=90,
        )

        server = client.get(Deployment, "shop-server", namespace=namespace)
        assert server.status.readyReplicas == 1
        assert client.get(Deployment, "shop-task-worker", namespace=namespace).status.readyReplicas == 1
        component = next(c for c in server.spec.template.spec.containers if c.name == "server")
        assert component.image == "example.com/shop/server:1.0.0"
        assert {e.name: e.value for e in component.env}["LOG_LEVEL"] == "debug"
        database = {e.name: e.value for e in component.env}["SHOP_DATABASE"]
        assert database == f"{namespace}-shop.sqlite3"

        succeeded, log = _migration_succeeds(
            client, namespace, "example.com/shop/server:1.0.0", component.env
        )
        assert succeeded, log
        assert _schema_version(cluster, database) == "1.0.0"

        # With the task worker running, the migration refuses: the upgrade action must stop it first.
        time.sleep(1.5)  # a heartbeat of the worker, now that the schema exists
        impatient = [*component.env, EnvVar(name="SHOP_MIGRATE_WAIT_SECONDS", value="0")]
        succeeded, log = _migration_succeeds(client, namespace, "example.com/shop/server:2.0.0", impatient)
        assert not succeeded
        assert "Stop the task-worker component first" in log
        assert _schema_version(cluster, database) == "1.0.0"

        # The upgrade, as the example's action does it: worker stopped, chart upgraded, migration, worker back.
        stopped = DeploymentConfiguration(values={"taskWorker": {"replicas": 0}}, env=configuration.env)
        install = prepare_install_chart(
            EXAMPLE_DRIVER, SPEC, "shop", namespace, "2.0.0", stopped, checksum_key=KEY
        )
        config.upgrade(
            str(install.write(tmp_path / "v2")),
            "shop",
            install.values,
            namespace=namespace,
            wait="watcher",
            timeout=90,
        )
        succeeded, log = _migration_succeeds(
            client, namespace, "example.com/shop/server:2.0.0", component.env
        )
        assert succeeded, log
        assert _schema_version(cluster, database) == "2.0.0"

        config.uninstall("shop", wait="watcher", timeout=60)
