"""Styrmin's own chart installed with real Helm into the local cluster, then used: the install test.

The chart's image (ghcr.io/styrmin/styrmin) runs this checkout's `styrmin` through an image catalog
(tests/production/catalog/); Styrmin and Prefect keep their data in fresh databases of this machine's
PostgreSQL, named in the Secrets the chart expects. Then, as docs/production.md tells an operator:
log in with the password of Secret styrmin-admin, register the agent and give it its key in Secret
styrmin-agent; and, as a user: push the example driver, create a deployment and upgrade it. The
agent runs in its pod and reaches the cluster through its service account, as in production.

What differs from a real cluster (docs/localcluster.md): every pod has IP 127.0.0.1 and there is no
DNS, so the ports are free ports given through values, the agent is given the server's and Prefect's
URLs on 127.0.0.1, and the server runs one replica (two would listen on the same port).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import helm_python as helm
import httpx
import pytest
from cryptography.fernet import Fernet
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Namespace, Pod, Secret

import styrmin
from styrmin_localcluster import LocalCluster
from tests.conftest import _pg_admin, _pg_url
from tests.support.drivers import EXAMPLE_DRIVER, driver_folder
from tests.support.kubectl import KUBECTL, port_forward, run_kubectl

pytestmark = pytest.mark.slow

CHART = Path(__file__).parents[2] / "deploy" / "chart"
CATALOG = Path(__file__).parent / "catalog"
NAMESPACE = "styrmin"
RELEASE = "styrmin"
ADMIN_PASSWORD = "install-test-admin-password"
# Generous: on a busy 2-core machine Prefect on PostgreSQL alone may take a minute to start.
START_SECONDS = 600
TASK_SECONDS = 600

T = TypeVar("T")

StyrminDeployment = create_namespaced_resource("styrmin.io", "v1", "StyrminDeployment", "styrmindeployments")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on now: each held bound until
    all are chosen, so none is chosen twice. Choose them once whatever else listens has started: a
    port given back is the kernel's next answer to a bind on port 0, such as the local cluster's own
    (its Prefect pod once failed "Port ... is already in use" on the cluster's port)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


class Installed:
    """The cluster, its client, and where the installed Styrmin answers."""

    def __init__(self, cluster: LocalCluster, kube: Client, server_url: str, prefect_url: str) -> None:
        self.cluster = cluster
        self.kube = kube
        self.server_url = server_url
        self.prefect_url = prefect_url

    def diagnostics(self) -> str:
        """Every pod's status and the end of every container's log, for failure messages."""
        lines = []
        try:
            for pod in self.kube.list(Pod, namespace="*"):
                statuses = [
                    f"{s.name}: ready={s.ready} restarts={s.restartCount} state={s.state.to_dict()}"
                    for s in (pod.status.containerStatuses or [])
                ]
                lines.append(
                    f"pod {pod.metadata.namespace}/{pod.metadata.name} {pod.status.phase} {statuses}"
                )
        except (ApiError, httpx.HTTPError) as error:
            lines.append(f"(pods could not be listed: {error})")
        try:
            for deployment in self.kube.list(Deployment, namespace="*"):
                lines.append(
                    f"deployment {deployment.metadata.namespace}/{deployment.metadata.name} "
                    f"spec.replicas={deployment.spec.replicas} status={deployment.status.to_dict()}"
                )
        except (ApiError, httpx.HTTPError) as error:
            lines.append(f"(deployments could not be listed: {error})")
        for log in sorted((self.cluster.data_dir / "pods").glob("*/*/*.log")):
            text = log.read_text(errors="replace").splitlines()[-40:]
            lines.append(f"--- {log.relative_to(self.cluster.data_dir)} (last {len(text)} lines)")
            lines.extend(text)
        cluster_log = self.cluster.data_dir / "localcluster.log"
        if cluster_log.exists():
            lines.append("--- localcluster.log (last 30 lines)")
            lines.extend(cluster_log.read_text(errors="replace").splitlines()[-30:])
        return "\n".join(lines)

    def wait_for(self, predicate: Callable[[], T | None], what: str, seconds: float = START_SECONDS) -> T:
        deadline = time.monotonic() + seconds
        last_error: Exception | None = None
        result: T | None = None
        while time.monotonic() < deadline:
            try:
                result = predicate()
                if result:
                    return result
            except (ApiError, httpx.HTTPError, styrmin.errors.StyrminError) as error:
                last_error = error
            time.sleep(1)
        raise AssertionError(
            f"waited {seconds} s for {what} (last value: {result!r}, last error: {last_error!r})\n"
            f"{self.diagnostics()}"
        )


def _available(kube: Client, name: str, namespace: str = NAMESPACE) -> bool:
    deployment = kube.get(Deployment, name, namespace=namespace)
    return any(
        c.type == "Available" and c.status == "True" for c in (deployment.status.conditions or [])
    ) and (deployment.status.availableReplicas or 0) >= (deployment.spec.replicas or 0)


@pytest.fixture
def databases() -> Iterator[tuple[str, str]]:
    """Fresh PostgreSQL databases for Styrmin and Prefect, dropped afterwards."""
    names = [f"install_{kind}_{os.getpid()}_{int(time.time())}" for kind in ("styrmin", "prefect")]
    with _pg_admin() as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield (
            _pg_url(names[0]),
            _pg_url(names[1]).replace("postgresql+psycopg://", "postgresql+asyncpg://"),
        )
    finally:
        with _pg_admin() as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def installed(tmp_path: Path, databases: tuple[str, str]) -> Iterator[Installed]:
    styrmin_url, prefect_url = databases
    with LocalCluster(tmp_path / "cluster", [CATALOG, EXAMPLE_DRIVER / "catalog"]) as cluster:
        server_port, prefect_port, metrics_port = free_ports(3)
        kube = Client(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="install-test")
        result = Installed(
            cluster, kube, f"http://127.0.0.1:{server_port}", f"http://127.0.0.1:{prefect_port}/api"
        )
        try:
            # As docs/production.md's install: the namespace and the Secrets first.
            kube.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
            kube.create(
                Secret(
                    metadata=ObjectMeta(name="styrmin-database"),
                    stringData={"url": styrmin_url, "prefectUrl": prefect_url},
                ),
                namespace=NAMESPACE,
            )
            kube.create(
                Secret(metadata=ObjectMeta(name="styrmin-admin"), stringData={"password": ADMIN_PASSWORD}),
                namespace=NAMESPACE,
            )
            kube.create(
                Secret(
                    metadata=ObjectMeta(name="styrmin-secret-key"),
                    stringData={"key": Fernet.generate_key().decode()},
                ),
                namespace=NAMESPACE,
            )
            values: dict[str, Any] = {
                # One replica: every pod has IP 127.0.0.1, so two servers would want the same port.
                "server": {
                    "replicas": 1,
                    "publicUrl": result.server_url,
                    "service": {"port": server_port},
                },
                "prefect": {"containerPort": prefect_port},
                "agent": {
                    # No DNS: the agent reaches the server and Prefect on 127.0.0.1, not their Services.
                    "serverUrl": result.server_url,
                    "prefectApiUrl": result.prefect_url,
                    "metricsPort": metrics_port,
                    "concurrency": 2,
                    "runnerPoolSize": 1,
                    "stopGraceSeconds": 10,
                },
            }
            with helm.Config(kubeconfig_path=cluster.kubeconfig_path, namespace=NAMESPACE) as config:
                # Only the hooks are waited for (the migrations Job): the agent's pod waits for its key,
                # which the running server makes.
                try:
                    release = config.install(CHART, RELEASE, values, wait="hookOnly", timeout=START_SECONDS)
                except helm.HelmError as error:
                    raise AssertionError(f"helm install failed: {error}\n{result.diagnostics()}") from error
            assert release["status"] == "deployed", release
            yield result
        finally:
            kube.close()


def test_the_chart_installs_into_the_local_cluster_and_deploys_and_upgrades_the_example(
    installed: Installed, tmp_path: Path
) -> None:
    kube = installed.kube
    # The migrations ran in the pre-install Job, which Helm deletes once it succeeded.
    with pytest.raises(ApiError):
        kube.get(Job, f"{RELEASE}-migrate-1", namespace=NAMESPACE)

    installed.wait_for(lambda: _available(kube, f"{RELEASE}-server"), "the server Deployment to be Available")
    installed.wait_for(
        lambda: _available(kube, "prefect-server"), "the prefect-server Deployment to be Available"
    )
    ready = httpx.get(f"{installed.server_url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert httpx.get(f"{installed.prefect_url}/health", timeout=30).status_code == 200
    if KUBECTL is not None:
        _reach_through_port_forward(installed, tmp_path)

    # The admin's password is the one in Secret styrmin-admin, read back as the NOTES say.
    secret = kube.get(Secret, "styrmin-admin", namespace=NAMESPACE)
    password = base64.b64decode((secret.data or {})["password"]).decode()
    with styrmin.Client(installed.server_url, timeout=60) as client:
        client.login("admin", password)

        # The agent's key, made as the chart's NOTES say, into the Secret the agent's pod waits for.
        _register_the_agent_as_the_notes_say(installed, client.token or "", tmp_path)
        installed.wait_for(
            lambda: _available(kube, f"{RELEASE}-agent"), "the agent Deployment to be Available"
        )
        installed.wait_for(
            lambda: next(a for a in client.agents.list() if a.name == "styrmin-agent").last_seen_at,
            "the agent in its pod to reach the server",
        )

        client.drivers.push(driver_folder(tmp_path / "shop", with_actions=True))
        # No cluster named: deployments and the chart's agent both default to cluster "local".
        change = client.deployments.create("shop", namespace="shop", driver="shop", driver_version="1.0.0")
        assert change.task is not None
        created = _wait_task(installed, client, change.task.id, "create")
        # The driver's setup action ran in the agent's pod as a flow run of the installed Prefect server.
        action = next((step for step in created.steps if step.flow_run_id), None)
        assert action is not None and action.status == "succeeded", created.steps
        flow_run = httpx.get(f"{installed.prefect_url}/flow_runs/{action.flow_run_id}", timeout=30)
        assert flow_run.status_code == 200 and flow_run.json()["state_type"] == "COMPLETED", flow_run.text

        installed.wait_for(
            lambda: _available(kube, "shop-server", "shop"), "the shop's server to be Available"
        )
        assert _image_tag(kube, "server") == "1.0.0"

        change = client.deployments.upgrade("shop", app_version="1.1.0")
        assert change.task is not None
        _wait_task(installed, client, change.task.id, "upgrade")

    installed.wait_for(
        lambda: _available(kube, "shop-server", "shop") and _image_tag(kube, "server") == "1.1.0",
        "the shop's server to run 1.1.0",
    )
    assert _image_tag(kube, "task-worker") == "1.1.0"
    # The shop's server process itself runs 1.1.0 (it says its version, the tag of its image, when it starts).
    pods = [p for p in kube.list(Pod, namespace="shop", labels={"app.kubernetes.io/component": "server"})]
    running = [p for p in pods if p.status.phase == "Running" and p.metadata.deletionTimestamp is None]
    assert running, installed.diagnostics()
    for pod in running:
        log = "".join(kube.log(pod.metadata.name, namespace="shop", container="server"))
        assert "shop server 1.1.0 started" in log, log + installed.diagnostics()
    # The agent wrote the deployment's revision into its StyrminDeployment, through its service account.
    record = kube.get(StyrminDeployment, "shop", namespace="shop")
    assert record.spec["appVersion"] == "1.1.0", record.spec


def _register_the_agent_as_the_notes_say(installed: Installed, token: str, home: Path) -> None:
    """Run the NOTES' `styrminctl agents register` line as printed, then the kubectl line it prints."""
    rendered = helm.Chart.load(CHART).render({}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = next(text for template, text in rendered.items() if template.endswith("NOTES.txt"))
    (line,) = [ln.strip() for ln in notes.splitlines() if ln.strip().startswith("styrminctl agents register")]
    result = subprocess.run(
        [sys.executable, "-m", "styrmin.cli", *shlex.split(line)[1:]],
        env={**os.environ, "STYRMIN_URL": installed.server_url, "STYRMIN_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{line}\nexited {result.returncode}: {result.stderr}"
    stored = shlex.split(result.stdout.splitlines()[-1])
    assert stored[:4] == ["kubectl", "create", "secret", "generic"], result.stdout
    if KUBECTL is not None:
        run_kubectl(installed.cluster.kubeconfig_path, home, NAMESPACE, *stored[1:])
        return
    # No kubectl here: the Secret the line would make, made the same way.
    name, literal = stored[4], stored[-1].removeprefix("--from-literal=")
    secret_key, _, value = literal.partition("=")
    installed.kube.create(
        Secret(metadata=ObjectMeta(name=name), stringData={secret_key: value}), namespace=NAMESPACE
    )


def _reach_through_port_forward(installed: Installed, home: Path) -> None:
    """The UI and the Prefect UI through `kubectl port-forward` to their Services, as docs/production.md
    says (the seed's `svc/prefect-server 4200:4200`, on a free local port: this machine's 4200 may be taken)."""
    kubeconfig = installed.cluster.kubeconfig_path
    server_port = int(installed.server_url.rsplit(":", 1)[1])
    with (
        port_forward(kubeconfig, home, NAMESPACE, "svc/prefect-server", f"{free_port()}:4200") as prefect,
        port_forward(
            kubeconfig, home, NAMESPACE, f"svc/{RELEASE}-server", f"{free_port()}:{server_port}"
        ) as ui,
    ):
        health = httpx.get(f"http://127.0.0.1:{prefect.local_port()}/api/health", timeout=30)
        assert health.status_code == 200, health.text + prefect.printed()
        page = httpx.get(f"http://127.0.0.1:{ui.local_port()}/login", timeout=30)
        assert page.status_code == 200 and "Styrmin" in page.text, page.text[:500] + ui.printed()


def _image_tag(kube: Client, name: str) -> str:
    """The tag of the image of the container named as the shop's component (beside a log shipper)."""
    deployment = kube.get(Deployment, f"shop-{name}", namespace="shop")
    (image,) = [c.image for c in deployment.spec.template.spec.containers if c.name == name]
    return str(image).rsplit(":", 1)[1]


def _wait_task(installed: Installed, client: styrmin.Client, task_id: int, what: str) -> styrmin.models.Task:
    def ended() -> styrmin.models.Task | None:
        task = client.tasks.get(task_id, wait_until_end=20)
        return task if task.ended else None

    task = installed.wait_for(ended, f"the {what} task #{task_id} to end", seconds=TASK_SECONDS)
    assert task.status == "succeeded", (
        f"the {what} task ended {task.status}: {task.error}\n"
        + "\n".join(f"step {s.name}: {s.status} {s.error or ''}" for s in task.steps)
        + "\n"
        + installed.diagnostics()
    )
    return task
