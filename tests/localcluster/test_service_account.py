"""A pod's service account and its startup probe, as a process in a pod sees them.

Each pod gets its own copy of /var/run/secrets/kubernetes.io/serviceaccount (token, ca.crt, namespace),
named in a catalog entry by the placeholder {serviceaccount}, so in-cluster clients work; a startupProbe
holds back readiness and liveness until it succeeds.
"""

from __future__ import annotations

import time

import httpx
import pytest
from lightkube import Client
from lightkube.models.batch_v1 import JobSpec
from lightkube.models.core_v1 import Container, ExecAction, PodSpec, PodTemplateSpec, Probe
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod, ServiceAccount

from styrmin_localcluster import LocalCluster
from tests.support.waiting import wait_for

from .test_workloads import _deployment

pytestmark = pytest.mark.slow

IN_CLUSTER_IMAGE = "example.com/tools/in-cluster-python:1"

# Reaches the API as an in-cluster client does: the folder's token and CA, KUBERNETES_SERVICE_HOST/PORT.
IN_CLUSTER_SCRIPT = """
import os, pathlib
folder = pathlib.Path(os.environ["SERVICE_ACCOUNT_DIR"])
print("folder", folder)
if not (folder / "token").exists():
    print("no token")
    raise SystemExit(0)
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Pod
namespace = (folder / "namespace").read_text()
client = Client(KubeConfig.from_service_account(folder))
names = [pod.metadata.name for pod in client.list(Pod, namespace=namespace)]
print("namespace", namespace, "sees itself", os.environ["HOSTNAME"] in names)
"""


def _run_job(
    client: Client,
    http: httpx.Client,
    namespace: str,
    name: str,
    automount: bool | None = None,
    service_account: str | None = None,
) -> str:
    container = Container(name="main", image=IN_CLUSTER_IMAGE, command=["python", "-c", IN_CLUSTER_SCRIPT])
    spec = PodSpec(
        containers=[container],
        restartPolicy="Never",
        automountServiceAccountToken=automount,
        serviceAccountName=service_account,
    )
    client.create(
        Job(
            metadata=ObjectMeta(name=name),
            spec=JobSpec(backoffLimit=0, template=PodTemplateSpec(spec=spec)),
        ),
        namespace=namespace,
    )

    def finished() -> Job | None:
        job = client.get(Job, name, namespace=namespace)
        return job if (job.status.succeeded or job.status.failed) else None

    job = wait_for(finished, timeout=120, message=f"job {name} to finish")
    pod = next(iter(client.list(Pod, namespace=namespace, labels={"job-name": name})))
    log = http.get(f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log").text
    assert job.status.succeeded == 1, log
    return log


def test_a_pod_finds_its_token_ca_and_namespace_and_reaches_the_api_in_cluster(
    client: Client, http: httpx.Client, namespace: str, cluster: LocalCluster
) -> None:
    log = _run_job(client, http, namespace, "in-cluster")
    assert f"namespace {namespace} sees itself True" in log
    folder = log.splitlines()[0].removeprefix("folder ")
    # The pod's own copy of the path Kubernetes mounts, inside the pod's folder.
    assert folder.endswith("/root/var/run/secrets/kubernetes.io/serviceaccount")
    assert folder.startswith(str(cluster.data_dir / "pods"))


def test_automount_false_on_the_pod_or_its_service_account_mounts_nothing(
    client: Client, http: httpx.Client, namespace: str
) -> None:
    assert "no token" in _run_job(client, http, namespace, "pod-off", automount=False)

    client.create(
        ServiceAccount(metadata=ObjectMeta(name="quiet"), automountServiceAccountToken=False),
        namespace=namespace,
    )
    assert "no token" in _run_job(client, http, namespace, "account-off", service_account="quiet")
    # The pod's own setting wins over its service account's, as in Kubernetes.
    log = _run_job(client, http, namespace, "pod-on", automount=True, service_account="quiet")
    assert "sees itself True" in log


def _flag_probe(flag: str, **options: int) -> Probe:
    return Probe(
        exec=ExecAction(
            command=["python", "-c", f"import os, sys; sys.exit(0 if os.path.exists({flag!r}) else 1)"]
        ),
        **options,
    )


def _server_deployment(
    name: str, startup: Probe, liveness: Probe | None = None, readiness: Probe | None = None
) -> Deployment:
    """A Deployment ``name`` of one pod whose one container, "server", has these probes."""
    container = Container(
        name="server",
        image="registry.local:5000/shop/server:1",
        startupProbe=startup,
        livenessProbe=liveness,
        readinessProbe=readiness,
    )
    return _deployment(name, container=container)


def test_a_startup_probe_holds_back_liveness_and_readiness_until_it_succeeds(
    cluster: LocalCluster, client: Client, namespace: str
) -> None:
    flag = str(cluster.data_dir / "data" / f"started-{namespace}")
    server = _server_deployment(
        "slow-start",
        startup=_flag_probe(flag, periodSeconds=1, failureThreshold=600),
        # Would kill the container within a second or two if it ran before the startup probe succeeded.
        liveness=_flag_probe(flag, periodSeconds=1, failureThreshold=1),
        readiness=_flag_probe(flag, periodSeconds=1),
    )
    client.create(server, namespace=namespace)
    pod = wait_for(
        lambda: next((p for p in client.list(Pod, namespace=namespace) if p.status.phase == "Running"), None),
        timeout=60,
        message="a running pod",
    )
    time.sleep(4)
    status = client.get(Pod, pod.metadata.name, namespace=namespace).status.containerStatuses[0]
    assert status.state.running is not None and status.restartCount == 0
    assert status.started is False and status.ready is False

    with open(flag, "w") as handle:
        handle.write("ok")
    status = wait_for(
        lambda: (
            (s := client.get(Pod, pod.metadata.name, namespace=namespace).status.containerStatuses[0]).ready
            and s
        ),
        timeout=60,
        message="the container to be started and ready",
    )
    assert status.started is True and status.restartCount == 0


def test_a_failing_startup_probe_restarts_the_container(
    cluster: LocalCluster, client: Client, namespace: str
) -> None:
    never = str(cluster.data_dir / "data" / f"never-{namespace}")
    server = _server_deployment(
        "never-starts", startup=_flag_probe(never, periodSeconds=1, failureThreshold=2)
    )
    client.create(server, namespace=namespace)
    wait_for(
        lambda: any(
            (p.status.containerStatuses or [None])[0] and p.status.containerStatuses[0].restartCount >= 1
            for p in client.list(Pod, namespace=namespace)
        ),
        timeout=60,
        message="the container to be restarted after its startup probe failed",
    )
