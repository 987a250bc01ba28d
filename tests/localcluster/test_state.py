"""The state file keeps the cluster's objects across restarts; without one, a restart starts empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod

from styrmin_localcluster import LocalCluster
from tests.support.waiting import wait_for

from .conftest import CATALOG
from .test_crds import STYRMIN_DEPLOYMENT_CRD
from .test_workloads import _condition, _deployment, _job

pytestmark = pytest.mark.slow
StyrminDeployment = create_namespaced_resource(
    "styrmin.io", "v1alpha1", "StyrminDeployment", "styrmindeployments"
)


def _client(cluster: LocalCluster) -> Client:
    return Client(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="tests")


def test_objects_survive_a_restart_with_a_state_file(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with LocalCluster(tmp_path / "run1", [CATALOG], state_file=state) as cluster:
        client = _client(cluster)
        client.create(Namespace(metadata=ObjectMeta(name="shop")))
        client.create(ConfigMap(metadata=ObjectMeta(name="kept"), data={"a": "1"}), namespace="shop")
        client.create(_deployment("web", replicas=2), namespace="shop")
        client.create(_job("once", "print('ran once')"), namespace="shop")
        client.create(CustomResourceDefinition.from_dict(STYRMIN_DEPLOYMENT_CRD))
        client.create(
            StyrminDeployment.from_dict(
                {"metadata": {"name": "shop"}, "spec": {"driver": "shop@1", "revision": 7}}
            ),
            namespace="shop",
        )
        wait_for(
            lambda: (s := client.get(Deployment, "web", namespace="shop").status) and s.readyReplicas == 2,
            message="the deployment",
        )
        wait_for(lambda: _condition(client.get(Job, "once", namespace="shop"), "Complete"), message="the job")
        uid = client.get(ConfigMap, "kept", namespace="shop").metadata.uid
        last_version = int(client.get(ConfigMap, "kept", namespace="shop").metadata.resourceVersion)
        client.close()
    assert state.exists()

    with LocalCluster(tmp_path / "run2", [CATALOG], state_file=state) as cluster:
        client = _client(cluster)
        kept = client.get(ConfigMap, "kept", namespace="shop")
        assert (kept.data, kept.metadata.uid) == ({"a": "1"}, uid)
        assert client.get(StyrminDeployment, "shop", namespace="shop").spec["revision"] == 7
        assert _condition(client.get(Job, "once", namespace="shop"), "Complete")
        # The deployment's pods run again, as after a node restart.
        wait_for(
            lambda: (s := client.get(Deployment, "web", namespace="shop").status) and s.readyReplicas == 2,
            message="the deployment after the restart",
        )
        running = [
            p
            for p in client.list(Pod, namespace="shop", labels={"app": "web"})
            if p.status.phase == "Running"
        ]
        assert len(running) == 2
        created = client.create(ConfigMap(metadata=ObjectMeta(name="later"), data={}), namespace="shop")
        assert int(created.metadata.resourceVersion) > last_version
        client.close()


def test_without_a_state_file_a_restart_starts_empty(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "run", [CATALOG]) as cluster:
        client = _client(cluster)
        client.create(ConfigMap(metadata=ObjectMeta(name="gone"), data={}), namespace="default")
        client.close()
    with LocalCluster(tmp_path / "run", [CATALOG]) as cluster:
        client = _client(cluster)
        with pytest.raises(ApiError):
            client.get(ConfigMap, "gone", namespace="default")
        client.close()


def test_a_broken_catalog_file_stops_the_start_with_its_name(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "bad.yaml").write_text(
        "apiVersion: localcluster.styrmin.io/v1\nkind: ImageCatalog\nimages:\n"
        "  - name: x\n    run: sometimes\n"
    )
    from styrmin_localcluster import LocalClusterError

    with pytest.raises(LocalClusterError) as raised:
        LocalCluster(tmp_path / "run", [catalog], startup_timeout=20).start()
    assert 'images[0].run: "sometimes" is not a run mode; use process or placeholder' in str(raised.value)
