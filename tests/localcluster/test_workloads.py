"""Controllers and the process kubelet: Deployments, StatefulSets, Jobs, images, logs, probes, deletion."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from lightkube import ApiError, Client
from lightkube.models.apps_v1 import DeploymentSpec, StatefulSetSpec
from lightkube.models.batch_v1 import JobSpec
from lightkube.models.core_v1 import (
    ConfigMapKeySelector,
    Container,
    EnvVar,
    EnvVarSource,
    ExecAction,
    PodSpec,
    PodTemplateSpec,
    Probe,
    SecretKeySelector,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret
from lightkube.types import CascadeType, PatchType

from styrmin_localcluster import LocalCluster
from tests.support.waiting import wait_for

PYTHON_IMAGE = "example.com/tools/python:3.11"


def _template(name: str, containers: list[Container], restart_policy: str | None = None) -> PodTemplateSpec:
    return PodTemplateSpec(
        metadata=ObjectMeta(labels={"app": name}),
        spec=PodSpec(containers=containers, restartPolicy=restart_policy),
    )


def _deployment(
    name: str,
    replicas: int = 1,
    image: str = "registry.local:5000/shop/server:1.0",
    env: list[EnvVar] | None = None,
    container: Container | None = None,
) -> Deployment:
    """Deployment ``name`` of pods labelled app=NAME running ``container``, by default "server" of ``image``."""
    container = container or Container(name="server", image=image, env=env)
    return Deployment(
        metadata=ObjectMeta(name=name),
        spec=DeploymentSpec(
            replicas=replicas,
            selector=LabelSelector(matchLabels={"app": name}),
            template=_template(name, [container]),
        ),
    )


def _job(name: str, script: str, backoff_limit: int = 0, **spec: object) -> Job:
    container = Container(name="main", image=PYTHON_IMAGE, command=["python", "-c", script])
    return Job(
        metadata=ObjectMeta(name=name),
        spec=JobSpec(backoffLimit=backoff_limit, template=_template(name, [container], "Never"), **spec),
    )


def _condition(obj: object, kind: str) -> object | None:
    for condition in (obj.status.conditions or []) if obj.status else []:  # type: ignore[attr-defined]
        if condition.type == kind and condition.status == "True":
            return condition
    return None


def _job_pods(client: Client, namespace: str, name: str) -> list[Pod]:
    return list(client.list(Pod, namespace=namespace, labels={"job-name": name}))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has ended too.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# --- Deployments ----------------------------------------------------------------------------------


def test_deployment_reports_a_complete_rollout(client: Client, namespace: str) -> None:
    client.create(_deployment("web", replicas=2), namespace=namespace)

    def rolled_out() -> Deployment | None:
        d = client.get(Deployment, "web", namespace=namespace)
        s = d.status
        done = (
            s
            and s.observedGeneration == d.metadata.generation
            and s.replicas == 2
            and s.readyReplicas == 2
            and s.updatedReplicas == 2
            and s.availableReplicas == 2
        )
        return d if done else None

    deployment = wait_for(rolled_out, message="the rollout")
    assert _condition(deployment, "Available").reason == "MinimumReplicasAvailable"
    assert _condition(deployment, "Progressing").reason == "NewReplicaSetAvailable"
    pods = list(client.list(Pod, namespace=namespace))
    assert len(pods) == 2
    assert all(p.status.phase == "Running" and p.spec.nodeName == "localcluster" for p in pods)
    assert all(p.metadata.ownerReferences[0].kind == "ReplicaSet" for p in pods)


def test_changing_the_template_rolls_out_a_new_replica_set(client: Client, namespace: str) -> None:
    client.create(_deployment("roll"), namespace=namespace)
    wait_for(
        lambda: (
            (client.get(Deployment, "roll", namespace=namespace).status or None)
            and client.get(Deployment, "roll", namespace=namespace).status.availableReplicas == 1
        ),
        message="v1",
    )
    first_pod = next(iter(client.list(Pod, namespace=namespace))).metadata.name
    client.patch(
        Deployment,
        "roll",
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "server", "env": [{"name": "MESSAGE", "value": "v2"}]}]}
                }
            }
        },
        namespace=namespace,
        patch_type=PatchType.STRATEGIC,
    )

    def finished() -> bool:
        d = client.get(Deployment, "roll", namespace=namespace)
        return bool(
            d.status.observedGeneration == 2
            and d.status.updatedReplicas == 1
            and d.status.replicas == 1
            and d.status.availableReplicas == 1
        )

    wait_for(finished, message="the second rollout")
    replica_sets = list(client.list(ReplicaSet, namespace=namespace))
    assert sorted(rs.spec.replicas for rs in replica_sets) == [0, 1]
    newest = next(rs for rs in replica_sets if rs.spec.replicas == 1)
    assert newest.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    wait_for(
        lambda: (
            [p.metadata.name for p in client.list(Pod, namespace=namespace)] != [first_pod]
            and len(list(client.list(Pod, namespace=namespace))) == 1
        ),
        message="the old pod to go",
    )


def test_scaling_to_zero_removes_the_pods_and_stops_their_processes(
    cluster: LocalCluster, client: Client, namespace: str
) -> None:
    client.create(_deployment("scaler", replicas=2), namespace=namespace)
    pods = wait_for(
        lambda: (
            [p for p in client.list(Pod, namespace=namespace) if p.status.phase == "Running"]
            if len(list(client.list(Pod, namespace=namespace))) == 2
            else None
        ),
        message="2 running pods",
    )
    data_dir = cluster.data_dir / "data"
    pids = [
        int(
            wait_for(
                lambda n=p.metadata.name: (
                    (data_dir / f"{n}.pid").exists() and (data_dir / f"{n}.pid").read_text()
                ),
                message="the pid file",
            )
        )
        for p in pods
    ]
    assert all(_process_alive(pid) for pid in pids)
    client.patch(
        Deployment, "scaler", {"spec": {"replicas": 0}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    wait_for(lambda: not list(client.list(Pod, namespace=namespace)), message="no pods")
    wait_for(lambda: not any(_process_alive(pid) for pid in pids), message="the processes to end")
    status = client.get(Deployment, "scaler", namespace=namespace).status
    assert not status.replicas and not status.readyReplicas


def test_container_env_command_and_args_follow_docker_semantics(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    client.create(
        ConfigMap(metadata=ObjectMeta(name="settings"), data={"message": "from-configmap"}),
        namespace=namespace,
    )
    env = [
        EnvVar(
            name="MESSAGE",
            valueFrom=EnvVarSource(configMapKeyRef=ConfigMapKeySelector(name="settings", key="message")),
        )
    ]
    client.create(_deployment("envy", env=env), namespace=namespace)
    pod = wait_for(
        lambda: next((p for p in client.list(Pod, namespace=namespace) if p.status.phase == "Running"), None),
        message="a running pod",
    )
    path = f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log"
    text = wait_for(lambda: "message=" in (log := http.get(path).text) and log, message="the server's log")
    # The catalog's entrypoint with its cmd as default arguments; the image ref with its registry and tag.
    assert "server started with args ['--greeting', 'hello']" in text
    assert "image=registry.local:5000/shop/server:1.0 message=from-configmap" in text


def test_placeholder_images_are_running_and_ready_without_a_process(client: Client, namespace: str) -> None:
    client.create(_deployment("idle", image="docker.io/library/nginx:1.27"), namespace=namespace)
    wait_for(
        lambda: (s := client.get(Deployment, "idle", namespace=namespace).status) and s.readyReplicas == 1,
        message="the placeholder to be ready",
    )
    pod = next(iter(client.list(Pod, namespace=namespace)))
    state = pod.status.containerStatuses[0]
    assert state.ready and state.state.running is not None
    assert list(client.log(pod.metadata.name, namespace=namespace)) == []


# --- StatefulSets ---------------------------------------------------------------------------------


def test_statefulset_creates_ordinal_pods_and_rolls_updates(client: Client, namespace: str) -> None:
    spec = StatefulSetSpec(
        replicas=2,
        serviceName="db",
        selector=LabelSelector(matchLabels={"app": "db"}),
        template=_template("db", [Container(name="db", image="nginx:1")]),
    )
    client.create(StatefulSet(metadata=ObjectMeta(name="db"), spec=spec), namespace=namespace)

    def settled(generation: int) -> StatefulSet | None:
        s = client.get(StatefulSet, "db", namespace=namespace)
        st = s.status
        ok = (
            st
            and st.observedGeneration == generation
            and st.readyReplicas == 2
            and st.updatedReplicas == 2
            and st.currentRevision == st.updateRevision
        )
        return s if ok else None

    first = wait_for(lambda: settled(1), message="2 ready ordinals")
    assert sorted(p.metadata.name for p in client.list(Pod, namespace=namespace)) == ["db-0", "db-1"]
    client.patch(
        StatefulSet,
        "db",
        {"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    second = wait_for(lambda: settled(2), message="the rolling update")
    assert second.status.updateRevision != first.status.updateRevision
    labels = {p.metadata.labels["controller-revision-hash"] for p in client.list(Pod, namespace=namespace)}
    assert labels == {second.status.updateRevision}
    client.patch(
        StatefulSet, "db", {"spec": {"replicas": 0}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    wait_for(lambda: not list(client.list(Pod, namespace=namespace)), message="no pods")


# --- Jobs -----------------------------------------------------------------------------------------


def test_job_runs_its_command_with_env_from_configmaps_and_secrets(
    http: httpx.Client, client: Client, namespace: str, tmp_path: Path
) -> None:
    client.create(ConfigMap(metadata=ObjectMeta(name="cfg"), data={"color": "blue"}), namespace=namespace)
    client.create(
        Secret(metadata=ObjectMeta(name="creds"), stringData={"password": "s3cret"}), namespace=namespace
    )
    script = (
        "import os; print(os.environ['COLOR'], os.environ['PASSWORD'], os.environ['PLAIN'], os.getcwd(), "
        "os.environ['LOCALCLUSTER_IMAGE'], sep='|')"
    )
    job = _job("envjob", script)
    job.spec.template.spec.containers[0].env = [
        EnvVar(
            name="COLOR",
            valueFrom=EnvVarSource(configMapKeyRef=ConfigMapKeySelector(name="cfg", key="color")),
        ),
        EnvVar(
            name="PASSWORD",
            valueFrom=EnvVarSource(secretKeyRef=SecretKeySelector(name="creds", key="password")),
        ),
        EnvVar(name="PLAIN", value="$(COLOR)-plain"),
    ]
    job.spec.template.spec.containers[0].workingDir = str(tmp_path)
    client.create(job, namespace=namespace)
    done = wait_for(
        lambda: (
            _condition(client.get(Job, "envjob", namespace=namespace), "Complete")
            and client.get(Job, "envjob", namespace=namespace)
        ),
        message="the job to complete",
    )
    assert done.status.succeeded == 1 and done.status.completionTime
    pod = _job_pods(client, namespace, "envjob")[0]
    assert pod.status.phase == "Succeeded"
    assert pod.status.containerStatuses[0].state.terminated.exitCode == 0
    log = http.get(f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log").text
    assert log == f"blue|s3cret|blue-plain|{tmp_path}|{PYTHON_IMAGE}\n"


def test_failing_job_shows_its_exit_code_and_log(http: httpx.Client, client: Client, namespace: str) -> None:
    client.create(
        _job(
            "fails",
            "import sys; print('migrating'); print('boom', file=sys.stderr); sys.exit(3)",
            backoff_limit=1,
        ),
        namespace=namespace,
    )
    failed = wait_for(
        lambda: _condition(client.get(Job, "fails", namespace=namespace), "Failed"), message="the job to fail"
    )
    assert failed.reason == "BackoffLimitExceeded"
    assert client.get(Job, "fails", namespace=namespace).status.failed == 2
    pods = _job_pods(client, namespace, "fails")
    assert len(pods) == 2
    for pod in pods:
        terminated = pod.status.containerStatuses[0].state.terminated
        assert (pod.status.phase, terminated.exitCode, terminated.reason) == ("Failed", 3, "Error")
        assert (
            http.get(f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log").text
            == "migrating\nboom\n"
        )


def test_active_deadline_stops_a_job_that_runs_too_long(client: Client, namespace: str) -> None:
    client.create(_job("slow", "import time; time.sleep(60)", activeDeadlineSeconds=1), namespace=namespace)
    failed = wait_for(
        lambda: _condition(client.get(Job, "slow", namespace=namespace), "Failed"),
        timeout=10,
        message="the deadline",
    )
    assert failed.reason == "DeadlineExceeded"
    wait_for(lambda: not _job_pods(client, namespace, "slow"), message="the pod to be removed")


def test_deleting_a_job_in_background_removes_its_pods_and_kills_the_process(
    cluster: LocalCluster, client: Client, namespace: str
) -> None:
    script = (
        "import os, time; open(os.path.join(os.environ['LOCALCLUSTER_DATA_DIR'], os.environ['HOSTNAME']),"
        " 'w').write(str(os.getpid())); time.sleep(120)"
    )
    client.create(_job("longjob", script), namespace=namespace)
    pod = wait_for(lambda: next(iter(_job_pods(client, namespace, "longjob")), None), message="the pod")
    pid_file = cluster.data_dir / "data" / pod.metadata.name
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), message="the process to start"))
    assert _process_alive(pid)
    client.delete(Job, "longjob", namespace=namespace, cascade=CascadeType.BACKGROUND)
    wait_for(lambda: not _job_pods(client, namespace, "longjob"), message="the pod to go")
    wait_for(lambda: not _process_alive(pid), message="the process to be killed")


def test_deleting_a_job_without_propagation_orphans_its_pods_like_kubernetes(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    client.create(_job("orphaner", "print('done')"), namespace=namespace)
    wait_for(
        lambda: _condition(client.get(Job, "orphaner", namespace=namespace), "Complete"), message="completion"
    )
    response = http.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/orphaner")
    assert "child pods are preserved by default" in response.headers["warning"]
    pods = _job_pods(client, namespace, "orphaner")
    assert len(pods) == 1 and not pods[0].metadata.ownerReferences


def test_an_image_missing_from_the_catalog_fails_the_pod_clearly(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    job = _job("noimage", "print('never')")
    job.spec.template.spec.containers[0].image = "example.com/unknown/app:2.0"
    client.create(job, namespace=namespace)
    failed = wait_for(
        lambda: _condition(client.get(Job, "noimage", namespace=namespace), "Failed"),
        message="the job to fail",
    )
    assert failed.reason == "BackoffLimitExceeded"
    pod = _job_pods(client, namespace, "noimage")[0]
    assert pod.status.phase == "Failed" and pod.status.reason == "ErrImagePull"
    waiting = pod.status.containerStatuses[0].state.waiting
    assert waiting.reason == "ErrImagePull"
    assert (
        'image "example.com/unknown/app:2.0" is not in the local cluster\'s image catalog' in waiting.message
    )
    assert 'add an entry with name "example.com/unknown/app"' in waiting.message
    response = http.get(f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log")
    assert response.status_code == 400
    assert "trying and failing to pull image" in response.json()["message"]


def test_a_deployment_with_a_missing_image_never_becomes_available(client: Client, namespace: str) -> None:
    client.create(_deployment("ghost", image="example.com/nothing/here:1"), namespace=namespace)
    pod = wait_for(
        lambda: next((p for p in client.list(Pod, namespace=namespace) if p.status.containerStatuses), None),
        message="the pod status",
    )
    assert pod.status.phase == "Pending"
    assert pod.status.containerStatuses[0].state.waiting.reason == "ErrImagePull"
    time.sleep(0.3)
    status = client.get(Deployment, "ghost", namespace=namespace).status
    assert not status.availableReplicas
    assert _condition(client.get(Deployment, "ghost", namespace=namespace), "Available") is None


def test_a_crashing_container_is_restarted_with_back_off_and_keeps_its_previous_log(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    container = Container(
        name="crash", image=PYTHON_IMAGE, command=["python", "-c", "print('crashing'); raise SystemExit(2)"]
    )
    client.create(_deployment("crashy", container=container), namespace=namespace)
    pod = wait_for(
        lambda: next(
            (
                p
                for p in client.list(Pod, namespace=namespace)
                if p.status.containerStatuses and p.status.containerStatuses[0].restartCount >= 1
            ),
            None,
        ),
        message="a restart",
    )
    status = pod.status.containerStatuses[0]
    assert status.lastState.terminated.exitCode == 2
    previous = http.get(
        f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log", params={"previous": "true"}
    )
    assert previous.text == "crashing\n"


def test_readiness_probe_decides_when_a_container_is_ready(
    cluster: LocalCluster, client: Client, namespace: str
) -> None:
    flag = cluster.data_dir / "data" / f"ready-{namespace}"
    probe = Probe(
        exec=ExecAction(
            command=["python", "-c", f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 1)"]
        ),
        periodSeconds=1,
    )
    container = Container(name="server", image="registry.local:5000/shop/server:1", readinessProbe=probe)
    client.create(_deployment("probed", container=container), namespace=namespace)
    pod = wait_for(
        lambda: next((p for p in client.list(Pod, namespace=namespace) if p.status.phase == "Running"), None),
        message="a running pod",
    )
    time.sleep(0.5)
    assert not client.get(Pod, pod.metadata.name, namespace=namespace).status.containerStatuses[0].ready
    flag.write_text("ok")
    wait_for(
        lambda: client.get(Pod, pod.metadata.name, namespace=namespace).status.containerStatuses[0].ready,
        message="readiness",
    )


# --- logs -----------------------------------------------------------------------------------------


def test_log_options_tail_lines_limit_bytes_and_container(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    client.create(_job("lines", "for i in range(1, 11): print(f'line {i}')"), namespace=namespace)
    wait_for(
        lambda: _condition(client.get(Job, "lines", namespace=namespace), "Complete"), message="completion"
    )
    name = _job_pods(client, namespace, "lines")[0].metadata.name
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
    assert http.get(path, params={"tailLines": "3"}).text == "line 8\nline 9\nline 10\n"
    assert http.get(path, params={"limitBytes": "13"}).text == "line 1\nline 2"
    assert http.get(path, params={"container": "main", "tailLines": "1"}).text == "line 10\n"
    assert http.get(path, params={"container": "nope"}).status_code == 400
    assert http.get(path, params={"tailLines": "3"}).headers["content-type"].startswith("text/plain")
    assert list(client.log(name, namespace=namespace, tail_lines=2)) == ["line 9\n", "line 10\n"]


def test_follow_streams_the_log_until_the_container_ends(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    script = "import time\nfor i in range(5):\n    print('tick', i, flush=True)\n    time.sleep(0.2)"
    client.create(_job("ticker", script), namespace=namespace)
    pod = wait_for(
        lambda: next(
            (p for p in _job_pods(client, namespace, "ticker") if p.status.phase == "Running"), None
        ),
        message="a running pod",
    )
    started = time.monotonic()
    chunks: list[str] = []
    with http.stream(
        "GET", f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/log", params={"follow": "true"}
    ) as response:
        assert response.headers.get("transfer-encoding") == "chunked"
        chunks.extend(response.iter_text())
    assert "".join(chunks) == "".join(f"tick {i}\n" for i in range(5))
    assert time.monotonic() - started >= 0.5
    assert list(client.log(pod.metadata.name, namespace=namespace, follow=True)) == [
        f"tick {i}\n" for i in range(5)
    ]


def test_large_logs_stay_in_files_and_tail_and_limit(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    script = (
        "import sys\nline = 'x' * 99 + '\\n'\nfor _ in range(200_000): sys.stdout.write(line)\nprint('last')"
    )
    client.create(_job("big", script), namespace=namespace)
    wait_for(
        lambda: _condition(client.get(Job, "big", namespace=namespace), "Complete"),
        timeout=30,
        message="completion",
    )
    name = _job_pods(client, namespace, "big")[0].metadata.name
    tail = http.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log", params={"tailLines": "2"}).text
    assert tail == "x" * 99 + "\nlast\n"
    limited = http.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log", params={"limitBytes": "1000"})
    assert len(limited.content) == 1000


def test_multi_container_pods_need_a_container_name_for_logs(
    http: httpx.Client, client: Client, namespace: str
) -> None:
    containers = [Container(name="a", image="nginx:1"), Container(name="b", image="nginx:1")]
    client.create(
        Pod(metadata=ObjectMeta(name="two"), spec=PodSpec(containers=containers)), namespace=namespace
    )
    response = http.get(f"/api/v1/namespaces/{namespace}/pods/two/log")
    assert response.status_code == 400
    assert (
        response.json()["message"] == "a container name must be specified for pod two, choose one of: [a b]"
    )


def test_pod_specs_are_immutable_except_images(client: Client, namespace: str) -> None:
    client.create(
        Pod(
            metadata=ObjectMeta(name="fixed"), spec=PodSpec(containers=[Container(name="a", image="nginx:1")])
        ),
        namespace=namespace,
    )
    with pytest.raises(ApiError) as raised:
        client.patch(
            Pod,
            "fixed",
            {"spec": {"restartPolicy": "Never"}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
    assert raised.value.status.code == 422
    assert "pod updates may not change fields" in raised.value.status.message


def test_daemonset_runs_one_pod_on_the_node_and_replaces_it_on_change(client: Client, namespace: str) -> None:
    from lightkube.models.apps_v1 import DaemonSetSpec
    from lightkube.resources.apps_v1 import DaemonSet

    client.create(
        DaemonSet(
            metadata=ObjectMeta(name="agent"),
            spec=DaemonSetSpec(
                selector=LabelSelector(matchLabels={"app": "agent"}),
                template=_template("agent", [Container(name="agent", image="shop/worker:1")]),
            ),
        ),
        namespace=namespace,
    )

    def ready(generation: int) -> bool:
        s = client.get(DaemonSet, "agent", namespace=namespace).status
        return bool(
            s
            and s.observedGeneration == generation
            and s.numberAvailable == 1
            and s.updatedNumberScheduled == 1
        )

    wait_for(lambda: ready(1), message="the daemon pod")
    first = [p.metadata.name for p in client.list(Pod, namespace=namespace)]
    client.patch(
        DaemonSet,
        "agent",
        {"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    wait_for(
        lambda: (
            ready(2) and [p.metadata.name for p in client.list(Pod, namespace=namespace)] not in ([], first)
        ),
        message="the replaced pod",
    )


def test_on_failure_jobs_restart_in_place_and_count_restarts_against_the_backoff_limit(
    client: Client, namespace: str
) -> None:
    job = _job("retry", "import sys; print('try'); sys.exit(1)", backoff_limit=0)
    job.spec.template.spec.restartPolicy = "OnFailure"
    client.create(job, namespace=namespace)
    failed = wait_for(
        lambda: _condition(client.get(Job, "retry", namespace=namespace), "Failed"), message="the job to fail"
    )
    assert failed.reason == "BackoffLimitExceeded"
    wait_for(lambda: not _job_pods(client, namespace, "retry"), message="the pod to be removed")


async def test_the_async_client_lists_and_watches(cluster: LocalCluster, namespace: str) -> None:
    from lightkube import AsyncClient, KubeConfig

    client = AsyncClient(KubeConfig.from_file(cluster.kubeconfig_path), field_manager="tests")
    created = await client.create(
        ConfigMap(metadata=ObjectMeta(name="async"), data={"a": "1"}), namespace=namespace
    )
    assert [c.metadata.name async for c in client.list(ConfigMap, namespace=namespace)].count("async") == 1
    await client.patch(
        ConfigMap, "async", {"data": {"a": "2"}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    async for event_type, obj in client.watch(
        ConfigMap, namespace=namespace, resource_version=created.metadata.resourceVersion
    ):
        assert (event_type, obj.data) == ("MODIFIED", {"a": "2"})
        break
    await client.close()


def test_a_command_that_cannot_start_fails_the_container_with_start_error(
    client: Client, namespace: str
) -> None:
    job = _job("nocommand", "")
    job.spec.template.spec.containers[0].command = ["no-such-program", "--flag"]
    client.create(job, namespace=namespace)
    wait_for(
        lambda: _condition(client.get(Job, "nocommand", namespace=namespace), "Failed"), message="the failure"
    )
    terminated = _job_pods(client, namespace, "nocommand")[0].status.containerStatuses[0].state.terminated
    assert (terminated.exitCode, terminated.reason) == (128, "StartError")
    assert "no-such-program" in terminated.message


def test_a_stuck_rollout_exceeds_its_progress_deadline(client: Client, namespace: str) -> None:
    deployment = _deployment("stuck", image="example.com/nothing/here:1")
    deployment.spec.progressDeadlineSeconds = 1
    client.create(deployment, namespace=namespace)

    def progressing() -> object | None:
        conditions = client.get(Deployment, "stuck", namespace=namespace).status.conditions or []
        return next((c for c in conditions if c.type == "Progressing" and c.status == "False"), None)

    condition = wait_for(progressing, timeout=10, message="the progress deadline")
    assert condition.reason == "ProgressDeadlineExceeded"
