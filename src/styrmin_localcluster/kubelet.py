"""The kubelet of the local cluster: runs each pod's containers as local processes from the image catalog.

A pod is bound to the one node, its images are resolved through the catalog, its init containers run one
after another, then its containers: a `process` image as a supervised subprocess whose stdout and stderr
go to a log file, a `placeholder` image as an idle container that is Running and Ready. Exit codes, restarts
by restartPolicy, readiness and liveness probes and graceful termination show in the pod's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .apiserver import PODS, ApiServer
from .catalog import CatalogImage, ImageCatalog
from .events import record_event
from .meta import now, set_condition
from .store import Event, clone

log = logging.getLogger("styrmin_localcluster.kubelet")

NODE_NAME = "localcluster"
POD_IP = "127.0.0.1"
# Restart back-off after a container exits: shorter than a real kubelet's 10 s .. 5 min.
RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
# How often a pod waiting for an image, a ConfigMap or a Secret looks again.
RETRY_SECONDS = 2.0
# Where Kubernetes mounts a pod's service-account token, CA and namespace; a pod gets its own copy of
# this path under its folder (`root/`), named in catalog entries by the placeholder {serviceaccount}.
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_PLACEHOLDER = "{serviceaccount}"
_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


class ContainerConfigError(Exception):
    """A container cannot start because a ConfigMap or Secret it names is missing."""


def expand_vars(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined variables are replaced, `$$` is a literal `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(replace, text)


class _Container:
    def __init__(self, spec: dict[str, Any], init: bool, restart_count: int = 0) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.image: str = spec.get("image", "")
        self.init = init
        self.restart_count = restart_count
        self.state: dict[str, Any] = {
            "waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}
        }
        self.last_state: dict[str, Any] = {}
        self.ready = False
        self.started = False
        self.process: asyncio.subprocess.Process | None = None
        self.image_entry: CatalogImage | None = None
        self.container_id = ""
        self.done = False
        self.exit_code: int | None = None

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": f"localcluster://{self.image_entry.source}" if self.image_entry else "",
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


class _PodRun:
    def __init__(self, pod: dict[str, Any], directory: Path) -> None:
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.directory = directory
        spec = pod.get("spec") or {}
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        previous = {
            s["name"]: s.get("restartCount", 0)
            for s in ((pod.get("status") or {}).get("containerStatuses") or [])
        }
        self.init_containers = [_Container(c, True) for c in spec.get("initContainers") or []]
        self.containers = [
            _Container(c, False, previous.get(c["name"], 0)) for c in spec.get("containers") or []
        ]
        self.start_time = (pod.get("status") or {}).get("startTime") or now()
        self.initialized = not self.init_containers
        self.pull_failure: str | None = None
        self.terminating = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.finished = False

    def all_containers(self) -> list[_Container]:
        return self.init_containers + self.containers

    def live_processes(self) -> list[asyncio.subprocess.Process]:
        return [
            c.process for c in self.all_containers() if c.process is not None and c.process.returncode is None
        ]

    def container(self, name: str) -> _Container | None:
        return next((c for c in self.all_containers() if c.name == name), None)


class Kubelet:
    """Runs the pods of the cluster; one per cluster, in the API server's event loop."""

    def __init__(
        self,
        api: ApiServer,
        catalog: ImageCatalog,
        data_dir: Path,
        server_url: Callable[[], str] = lambda: "",
        token: str = "",
        ca_pem: bytes = b"",
    ) -> None:
        self.api = api
        self.catalog = catalog
        self.data_dir = Path(data_dir)
        self.pods_dir = self.data_dir / "pods"
        self.shared_dir = self.data_dir / "data"
        self.server_url = server_url
        # What a pod's service-account folder holds: the cluster's one token (there is no RBAC) and its CA.
        self.token = token
        self.ca_pem = ca_pem
        self.runs: dict[str, _PodRun] = {}
        self._finished_dirs: dict[str, Path] = {}
        self._pending: set[asyncio.Task[Any]] = set()
        self._started = False
        api.pod_is_running = self.pod_is_running
        api.store.add_listener(self._on_event)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Register the node and take over the pods already in the store (after a restart)."""
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.shared_dir.mkdir(parents=True, exist_ok=True)
        self._register_node()
        self._started = True
        for pod in self.api.store.list(PODS):
            self._adopt(pod)

    def _register_node(self) -> None:
        nodes = ("", "nodes")
        timestamp = now()
        node = self.api.store.get(nodes, "", NODE_NAME)
        status = {
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": timestamp,
                    "lastTransitionTime": timestamp,
                }
                for t, s, r, m in (
                    (
                        "MemoryPressure",
                        "False",
                        "KubeletHasSufficientMemory",
                        "kubelet has sufficient memory available",
                    ),
                    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    (
                        "PIDPressure",
                        "False",
                        "KubeletHasSufficientPID",
                        "kubelet has sufficient PID available",
                    ),
                    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                )
            ],
            "addresses": [
                {"type": "InternalIP", "address": POD_IP},
                {"type": "Hostname", "address": NODE_NAME},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.33.0",
                "operatingSystem": "linux",
                "architecture": os.uname().machine,
                "containerRuntimeVersion": "localcluster://1",
                "osImage": "local processes",
                "kernelVersion": os.uname().release,
                "kubeProxyVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
            "capacity": {"cpu": str(os.cpu_count() or 1), "memory": "16Gi", "pods": "1000"},
            "allocatable": {"cpu": str(os.cpu_count() or 1), "memory": "16Gi", "pods": "1000"},
        }
        if node is None:
            self.api.create(
                self.api.type_for(nodes),
                None,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": NODE_NAME,
                        "labels": {
                            "kubernetes.io/hostname": NODE_NAME,
                            "kubernetes.io/os": "linux",
                            "node-role.kubernetes.io/control-plane": "",
                        },
                    },
                    "spec": {},
                },
            )
            node = self.api.store.get(nodes, "", NODE_NAME)
        assert node is not None
        self.api.write_status(nodes, node, status)

    async def shutdown(self) -> None:
        """Stop every process (the pods stay in the store, as after a node restart)."""
        runs = list(self.runs.values())
        for run in runs:
            run.terminating.set()
        await asyncio.gather(*(self._stop_processes(run, 2.0) for run in runs), return_exceptions=True)
        for run in runs:
            if run.task is not None:
                run.task.cancel()
        for task in list(self._pending):
            task.cancel()

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    # --- reacting to pods ------------------------------------------------------------------------

    def pod_is_running(self, pod: dict[str, Any]) -> bool:
        run = self.runs.get(pod["metadata"]["uid"])
        return run is not None and bool(run.live_processes())

    def _on_event(self, event: Event) -> None:
        if event.key != PODS or not self._started:
            return
        pod = event.obj
        uid = pod["metadata"]["uid"]
        if event.type == "DELETED":
            run = self.runs.pop(uid, None)
            if run is not None:
                run.terminating.set()
                self._spawn(self._stop_processes(run, 0))
                if run.task is not None:
                    run.task.cancel()
            directory = self._finished_dirs.pop(uid, None) or (run.directory if run else None)
            if directory is not None:
                self._spawn(asyncio.to_thread(shutil.rmtree, directory, True))
            return
        if pod["metadata"].get("deletionTimestamp"):
            run = self.runs.get(uid)
            if run is not None and not run.terminating.is_set():
                run.terminating.set()
                self._spawn(self._terminate(run, int(pod["metadata"].get("deletionGracePeriodSeconds") or 0)))
            elif run is None and not pod["metadata"].get("finalizers"):
                self._spawn(self._remove_soon(pod))
            return
        if event.type == "ADDED":
            self._adopt(pod)

    def _adopt(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.runs:
            return
        phase = (pod.get("status") or {}).get("phase")
        directory = self.pods_dir / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}_{uid}"
        if phase in ("Succeeded", "Failed"):
            self._finished_dirs[uid] = directory
            return
        if pod["metadata"].get("deletionTimestamp"):
            self._spawn(self._remove_soon(pod))
            return
        spec = pod.get("spec") or {}
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        was_running = any("running" in (s.get("state") or {}) for s in statuses)
        if was_running and spec.get("restartPolicy") == "Never":
            # The cluster stopped while these processes ran; they are gone, as after a node restart.
            self._spawn(self._fail_lost_pod(pod))
            self._finished_dirs[uid] = directory
            return
        run = _PodRun(pod, directory)
        self.runs[uid] = run
        run.task = self._spawn(self._run_pod(run))

    async def _remove_soon(self, pod: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        self.api.remove_now(PODS, pod)

    async def _fail_lost_pod(self, pod: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        status = clone(pod.get("status") or {})
        for container in status.get("containerStatuses") or []:
            if "running" in (container.get("state") or {}):
                container["state"] = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "startedAt": container["state"]["running"].get("startedAt"),
                        "finishedAt": now(),
                    }
                }
                container["ready"] = False
                container["started"] = False
        status["phase"] = "Failed"
        self.api.write_status(PODS, pod, status)

    # --- running a pod ---------------------------------------------------------------------------

    def _current(self, run: _PodRun) -> dict[str, Any] | None:
        pod = self.api.store.get(PODS, run.namespace, run.name)
        if pod is None or pod["metadata"]["uid"] != run.uid:
            return None
        return pod

    def _phase(self, run: _PodRun) -> str:
        if run.pull_failure and run.restart_policy != "Always":
            return "Failed"
        if not run.initialized:
            if (
                any(c.done and c.exit_code not in (0, None) for c in run.init_containers)
                and run.restart_policy == "Never"
            ):
                return "Failed"
            return "Pending"
        if all(c.done for c in run.containers):
            return "Succeeded" if all(c.exit_code == 0 for c in run.containers) else "Failed"
        if any(
            c.started or "running" in c.state or "terminated" in c.state or c.restart_count
            for c in run.containers
        ):
            return "Running"
        return "Pending"

    def _write_status(self, run: _PodRun) -> None:
        pod = self._current(run)
        if pod is None:
            return
        old = pod.get("status") or {}
        phase = self._phase(run)
        conditions = list(old.get("conditions") or [])
        all_ready = all(c.ready for c in run.containers) and phase == "Running"
        completed = phase in ("Succeeded", "Failed")
        conditions = set_condition(conditions, "PodReadyToStartContainers", "True")
        conditions = set_condition(
            conditions,
            "Initialized",
            "True" if run.initialized else "False",
            "" if run.initialized else "ContainersNotInitialized",
            ""
            if run.initialized
            else "containers with incomplete status: ["
            + " ".join(c.name for c in run.init_containers if not c.done)
            + "]",
        )
        not_ready = "" if all_ready else ("PodCompleted" if completed else "ContainersNotReady")
        message = (
            ""
            if all_ready or completed
            else "containers with unready status: ["
            + " ".join(c.name for c in run.containers if not c.ready)
            + "]"
        )
        conditions = set_condition(conditions, "Ready", "True" if all_ready else "False", not_ready, message)
        conditions = set_condition(
            conditions, "ContainersReady", "True" if all_ready else "False", not_ready, message
        )
        conditions = set_condition(conditions, "PodScheduled", "True")
        for condition in conditions:
            if condition.get("reason") == "":
                condition.pop("reason")
        order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
        conditions.sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "startTime": run.start_time,
            "containerStatuses": [c.status() for c in run.containers],
            "qosClass": old.get("qosClass", "BestEffort"),
        }
        if run.init_containers:
            status["initContainerStatuses"] = [c.status() for c in run.init_containers]
        if run.pull_failure and phase == "Failed":
            status["reason"] = "ErrImagePull"
            status["message"] = run.pull_failure
        self.api.write_status(PODS, pod, status)

    async def _run_pod(self, run: _PodRun) -> None:
        try:
            await self._bind(run)
            if not await self._resolve_images(run):
                return
            self._mount_service_account(run)
            for container in run.init_containers:
                if not await self._run_init_container(run, container):
                    return
            run.initialized = True
            for container in run.containers:
                container.state = {"waiting": {"reason": "ContainerCreating"}}
            self._write_status(run)
            await asyncio.gather(*(self._run_container(run, c) for c in run.containers))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s failed in the kubelet", run.namespace, run.name)
        finally:
            if not run.terminating.is_set():
                self._finish(run)

    def _finish(self, run: _PodRun) -> None:
        run.finished = True
        if self.runs.get(run.uid) is run:
            del self.runs[run.uid]
            self._finished_dirs[run.uid] = run.directory

    async def _bind(self, run: _PodRun) -> None:
        pod = self._current(run)
        if pod is None:
            return
        if (pod.get("spec") or {}).get("nodeName") != NODE_NAME:
            bound = clone(pod)
            bound["spec"]["nodeName"] = NODE_NAME
            pod = self.api.write(PODS, bound)
            record_event(
                self.api,
                pod,
                "Normal",
                "Scheduled",
                f"Successfully assigned {run.namespace}/{run.name} to {NODE_NAME}",
                "default-scheduler",
            )
        self._write_status(run)

    def _missing_image_message(self, image: str) -> str:
        from .catalog import split_image

        host, repository = split_image(image)
        return (
            f'image "{image}" is not in the local cluster\'s image catalog (folders: {self.catalog.describe()}); '
            f'add an entry with name "{f"{host}/{repository}" if host else repository}" to a catalog file '
            "(see docs/localcluster.md)"
        )

    async def _resolve_images(self, run: _PodRun) -> bool:
        while True:
            missing = []
            for container in run.all_containers():
                container.image_entry = self.catalog.resolve(container.image)
                if container.image_entry is None:
                    missing.append(container)
            if not missing:
                if run.pull_failure:
                    run.pull_failure = None
                for container in run.all_containers():
                    if (
                        "waiting" in container.state
                        and container.state["waiting"].get("reason") == "ErrImagePull"
                    ):
                        container.state = {"waiting": {"reason": "PodInitializing"}}
                return True
            message = self._missing_image_message(missing[0].image)
            first_failure = run.pull_failure is None
            run.pull_failure = message
            for container in missing:
                container.state = {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": self._missing_image_message(container.image),
                    }
                }
            self._write_status(run)
            pod = self._current(run)
            if first_failure and pod is not None:
                record_event(
                    self.api,
                    pod,
                    "Warning",
                    "Failed",
                    f'Failed to pull image "{missing[0].image}": {message}',
                    "kubelet",
                )
            if run.restart_policy != "Always":
                return False
            if await _terminated_within(run, RETRY_SECONDS):
                return False

    # --- service account -------------------------------------------------------------------------

    def service_account_dir(self, run: _PodRun) -> Path:
        """The pod's copy of /var/run/secrets/kubernetes.io/serviceaccount (catalog: {serviceaccount})."""
        return run.directory / "root" / SERVICE_ACCOUNT_PATH.lstrip("/")

    def _mount_service_account(self, run: _PodRun) -> None:
        """Write token, ca.crt and namespace as Kubernetes mounts them, unless automounting is off.

        As in Kubernetes, the pod's `automountServiceAccountToken` wins over its ServiceAccount's.
        """
        pod = self._current(run)
        if pod is None or not self.token:
            return
        spec = pod.get("spec") or {}
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            account = self.api.store.get(
                ("", "serviceaccounts"), run.namespace, spec.get("serviceAccountName") or "default"
            )
            automount = (account or {}).get("automountServiceAccountToken", True)
        if automount is False:
            return
        folder = self.service_account_dir(run)
        folder.mkdir(parents=True, exist_ok=True)
        for name, content, mode in (
            ("token", self.token.encode(), 0o600),
            ("ca.crt", self.ca_pem, 0o644),
            ("namespace", run.namespace.encode(), 0o644),
        ):
            path = folder / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)

    def _placeholders(self, run: _PodRun, text: str) -> str:
        return text.replace("{python}", sys.executable).replace(
            SERVICE_ACCOUNT_PLACEHOLDER, str(self.service_account_dir(run))
        )

    # --- containers ------------------------------------------------------------------------------

    def _resolve_env(self, pod: dict[str, Any], container: _Container) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for source in container.spec.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for kind, ref_key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
                ref = source.get(ref_key)
                if ref is None:
                    continue
                obj = self._config_source(kind, namespace, ref)
                if obj is None:
                    continue
                for key, value in self._data_of(kind, obj).items():
                    env[prefix + key] = value
        for entry in container.spec.get("env") or []:
            name = entry["name"]
            if "valueFrom" not in entry:
                env[name] = expand_vars(str(entry.get("value") or ""), env)
                continue
            source = entry["valueFrom"]
            resolved = self._value_from(pod, source, namespace)
            if resolved is not None:
                env[name] = resolved
        return env

    def _config_source(self, kind: str, namespace: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        """The ConfigMap or Secret a reference names; None when it is missing but optional."""
        obj = self.api.store.get(("", kind), namespace, ref.get("name", ""))
        if obj is None and not ref.get("optional"):
            raise ContainerConfigError(f'{kind[:-1]} "{ref.get("name")}" not found')
        return obj

    def _data_of(self, kind: str, obj: dict[str, Any]) -> dict[str, str]:
        import base64

        if kind == "secrets":
            return {
                k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()
            }
        data = dict(obj.get("data") or {})
        for key, value in (obj.get("binaryData") or {}).items():
            data[key] = base64.b64decode(value).decode("utf-8", "replace")
        return data

    def _value_from(self, pod: dict[str, Any], source: dict[str, Any], namespace: str) -> str | None:
        for kind, ref_key, label in (
            ("configmaps", "configMapKeyRef", "ConfigMap"),
            ("secrets", "secretKeyRef", "Secret"),
        ):
            ref = source.get(ref_key)
            if ref is None:
                continue
            obj = self._config_source(kind, namespace, ref)
            if obj is None:
                return None
            data = self._data_of(kind, obj)
            if ref.get("key") not in data:
                if ref.get("optional"):
                    return None
                raise ContainerConfigError(
                    f"couldn't find key {ref.get('key')} in {label} {namespace}/{ref.get('name')}"
                )
            return data[ref["key"]]
        field_ref = source.get("fieldRef")
        if field_ref is not None:
            return self._field_value(pod, field_ref.get("fieldPath", ""))
        if source.get("resourceFieldRef") is not None:
            return "0"
        return None

    def _field_value(self, pod: dict[str, Any], path: str) -> str:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        values = {
            "metadata.name": meta.get("name"),
            "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": NODE_NAME,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.hostIP": POD_IP,
            "status.hostIPs": POD_IP,
            "status.podIP": POD_IP,
            "status.podIPs": POD_IP,
        }
        return str(values.get(path) or "")

    def _command(self, run: _PodRun, container: _Container, env: dict[str, str]) -> list[str]:
        image = container.image_entry
        assert image is not None
        spec = container.spec
        if spec.get("command"):
            argv = list(spec["command"]) + list(spec.get("args") or [])
        elif spec.get("args") is not None:
            argv = list(image.entrypoint) + list(spec["args"])
        else:
            argv = list(image.entrypoint) + list(image.cmd)
        argv = [self._placeholders(run, expand_vars(arg, env)) for arg in argv]
        if not argv:
            raise ContainerConfigError(
                f'image "{container.image}" has no entrypoint in the catalog ({image.source}) and the container '
                "gives no command"
            )
        return argv

    def _working_dir(self, run: _PodRun, container: _Container) -> Path:
        image = container.image_entry
        assert image is not None
        wanted = container.spec.get("workingDir")
        if not wanted:
            return image.work_dir
        path = Path(wanted)
        if not path.is_absolute():
            return image.work_dir / path
        if path.is_dir():
            return path
        # The image's folder does not exist on this machine: give the pod its own copy of that path.
        local = run.directory / "root" / path.relative_to("/")
        local.mkdir(parents=True, exist_ok=True)
        return local

    def _process_env(self, run: _PodRun, container: _Container, env: dict[str, str]) -> dict[str, str]:
        image = container.image_entry
        assert image is not None
        python_dir = os.path.dirname(sys.executable)
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        base = {
            "PATH": f"{python_dir}{os.pathsep}{path}",
            "HOME": str(run.directory / "home"),
            "HOSTNAME": run.name,
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
        }
        url = self.server_url()
        if url:
            host_port = url.split("://", 1)[-1]
            host, _, port = host_port.partition(":")
            base["KUBERNETES_SERVICE_HOST"] = host
            base["KUBERNETES_SERVICE_PORT"] = port
        (run.directory / "home").mkdir(parents=True, exist_ok=True)
        image_env = {name: self._placeholders(run, value) for name, value in image.env.items()}
        result = {**base, **image_env, **env}
        result["LOCALCLUSTER_IMAGE"] = container.image
        result["LOCALCLUSTER_DATA_DIR"] = str(self.shared_dir)
        return result

    def log_path(self, run_dir: Path, container: str, restart: int) -> Path:
        return run_dir / container / f"{restart}.log"

    async def _start_process(self, run: _PodRun, container: _Container) -> asyncio.subprocess.Process | None:
        """Start the container's process; None when its configuration is missing (it waits and retries)."""
        while True:
            pod = self._current(run)
            if pod is None or run.terminating.is_set():
                return None
            try:
                env = self._resolve_env(pod, container)
                argv = self._command(run, container, env)
                cwd = self._working_dir(run, container)
                process_env = self._process_env(run, container, env)
            except ContainerConfigError as exc:
                waiting = container.state.get("waiting") or {}
                if waiting.get("message") != str(exc):
                    container.state = {
                        "waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}
                    }
                    self._write_status(run)
                    record_event(self.api, pod, "Warning", "Failed", f"Error: {exc}", "kubelet")
                if await _terminated_within(run, RETRY_SECONDS):
                    return None
                continue
            log_file = self.log_path(run.directory, container.name, container.restart_count)
            log_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=str(cwd),
                    env=process_env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=fd,
                    stderr=fd,
                    start_new_session=True,
                    preexec_fn=_die_with_cluster,
                )
            except OSError as exc:
                os.close(fd)
                message = f"failed to start container process: exec: {argv[0]!r}: {exc.strerror or exc}"
                container.state = {
                    "terminated": {
                        "exitCode": 128,
                        "reason": "StartError",
                        "message": message,
                        "startedAt": now(),
                        "finishedAt": now(),
                    }
                }
                with open(log_file, "a") as handle:
                    handle.write(message + "\n")
                return None
            os.close(fd)
            return process

    async def _run_init_container(self, run: _PodRun, container: _Container) -> bool:
        while True:
            if container.image_entry is not None and container.image_entry.run == "placeholder":
                container.state = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now(),
                        "finishedAt": now(),
                    }
                }
                container.done, container.exit_code = True, 0
                self._write_status(run)
                return True
            code = await self._run_once(run, container)
            if code is None:
                return False
            if code == 0:
                return True
            if run.restart_policy == "Never":
                self._write_status(run)
                return False
            if not await self._back_off(run, container):
                return False

    async def _run_container(self, run: _PodRun, container: _Container) -> None:
        while True:
            if container.image_entry is not None and container.image_entry.run == "placeholder":
                # An idle container writes nothing: its log exists and stays empty.
                log_file = self.log_path(run.directory, container.name, container.restart_count)
                log_file.parent.mkdir(parents=True, exist_ok=True)
                log_file.touch()
                container.state = {"running": {"startedAt": now()}}
                container.started = True
                container.ready = True
                container.container_id = f"localcluster://placeholder/{run.uid}/{container.name}"
                self._write_status(run)
                await run.terminating.wait()
                return
            code = await self._run_once(run, container)
            if code is None or run.terminating.is_set():
                return
            restart = run.restart_policy == "Always" or (run.restart_policy == "OnFailure" and code != 0)
            if not restart:
                self._write_status(run)
                return
            if not await self._back_off(run, container):
                return

    async def _back_off(self, run: _PodRun, container: _Container) -> bool:
        """Wait before restarting a container; False when the pod is being terminated meanwhile."""
        delay = RESTART_BACKOFF[min(container.restart_count, len(RESTART_BACKOFF) - 1)]
        container.last_state = container.state
        container.restart_count += 1
        container.done = False
        container.exit_code = None
        container.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {int(delay)}s restarting failed container={container.name} "
                f"pod={run.name}_{run.namespace}({run.uid})",
            }
        }
        self._write_status(run)
        pod = self._current(run)
        if pod is not None:
            record_event(
                self.api,
                pod,
                "Warning",
                "BackOff",
                "Back-off restarting failed container "
                f"{container.name} in pod {run.name}_{run.namespace}({run.uid})",
                "kubelet",
            )
        return not await _terminated_within(run, delay)

    async def _run_once(self, run: _PodRun, container: _Container) -> int | None:
        """Run the container's process until it exits; its exit code, or None when it never started."""
        process = await self._start_process(run, container)
        if process is None:
            if "terminated" in container.state:
                container.done, container.exit_code = True, container.state["terminated"]["exitCode"]
                self._write_status(run)
                return int(container.exit_code or 1)
            return None
        container.process = process
        started_at = now()
        container.container_id = f"localcluster://{process.pid}"
        container.state = {"running": {"startedAt": started_at}}
        startup = None if container.init else container.spec.get("startupProbe")
        # With a startupProbe, a container is started (and probed for readiness and liveness) only once
        # that probe succeeds, as in Kubernetes.
        container.started = startup is None
        probe = container.spec.get("readinessProbe")
        container.ready = probe is None and startup is None and not container.init
        self._write_status(run)
        pod = self._current(run)
        if pod is not None and container.restart_count == 0:
            record_event(self.api, pod, "Normal", "Started", f"Started container {container.name}", "kubelet")
        probes = []
        if not container.init:
            probes.append(self._spawn(self._run_probes(run, container, process, startup)))
        code = await process.wait()
        for task in probes:
            task.cancel()
        container.process = None
        container.ready = False
        container.started = False
        container.done, container.exit_code = True, code
        if code < 0:
            code = 128 + (-code)
            container.exit_code = code
        container.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started_at,
                "finishedAt": now(),
                "containerID": container.container_id,
            }
        }
        if not run.terminating.is_set():
            self._write_status(run)
        return code

    # --- probes ----------------------------------------------------------------------------------

    async def _run_probes(
        self,
        run: _PodRun,
        container: _Container,
        process: asyncio.subprocess.Process,
        startup: dict[str, Any] | None,
    ) -> None:
        """The startupProbe until it succeeds, then the readiness and liveness probes."""
        if startup is not None:
            if not await self._probe_loop(run, container, process, startup, "startup"):
                return
            container.started = True
            if container.spec.get("readinessProbe") is None:
                container.ready = True
            self._write_status(run)
        loops = [
            self._probe_loop(run, container, process, container.spec[key], kind)
            for key, kind in (("readinessProbe", "readiness"), ("livenessProbe", "liveness"))
            if container.spec.get(key) is not None
        ]
        await asyncio.gather(*loops)

    async def _probe_loop(
        self,
        run: _PodRun,
        container: _Container,
        process: asyncio.subprocess.Process,
        probe: dict[str, Any],
        kind: str,
    ) -> bool:
        """Probe until the process ends; a startup probe returns True at its first success."""
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        period = float(probe.get("periodSeconds", 10))
        successes = failures = 0
        while process.returncode is None and not run.terminating.is_set():
            ok = await self._probe(run, container, probe)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if kind == "startup" and ok:
                return True
            if kind == "readiness":
                ready = container.ready
                if ok and successes >= int(probe.get("successThreshold", 1)):
                    ready = True
                elif not ok and failures >= int(probe.get("failureThreshold", 3)):
                    ready = False
                if ready != container.ready:
                    container.ready = ready
                    self._write_status(run)
            elif not ok and failures >= int(probe.get("failureThreshold", 3)):
                pod = self._current(run)
                if pod is not None:
                    record_event(
                        self.api,
                        pod,
                        "Normal",
                        "Killing",
                        f"Container {container.name} failed {kind} probe, will be restarted",
                        "kubelet",
                    )
                _signal_group(process, signal.SIGKILL)
                return False
            # A quick first answer matters more here than on a real node: probe soon again until ready.
            # (A startup probe keeps its period: its failureThreshold times it is the time allowed.)
            await asyncio.sleep(min(period, 0.5) if not container.ready and kind == "readiness" else period)
        return False

    async def _probe(self, run: _PodRun, container: _Container, probe: dict[str, Any]) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "exec" in probe:
                pod = self._current(run)
                if pod is None:
                    return False
                env = self._process_env(run, container, self._resolve_env(pod, container))
                process = await asyncio.create_subprocess_exec(
                    *probe["exec"].get("command", []),
                    cwd=str(self._working_dir(run, container)),
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                try:
                    return await asyncio.wait_for(process.wait(), timeout) == 0
                except TimeoutError:
                    process.kill()
                    return False
            if "httpGet" in probe or "tcpSocket" in probe:
                action = probe.get("httpGet") or probe.get("tcpSocket") or {}
                port = self._port(container, action.get("port"))
                host = action.get("host") or POD_IP
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                try:
                    if "tcpSocket" in probe:
                        return True
                    path = action.get("path", "/")
                    writer.write(
                        f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\n\r\n".encode()
                    )
                    await writer.drain()
                    line = await asyncio.wait_for(reader.readline(), timeout)
                    parts = line.split()
                    return len(parts) >= 2 and 200 <= int(parts[1]) < 400
                finally:
                    writer.close()
            if "grpc" in probe:
                return True
        except (OSError, TimeoutError, ValueError, ContainerConfigError):
            return False
        return True

    def _port(self, container: _Container, port: Any) -> int:
        if isinstance(port, int):
            return port
        for entry in container.spec.get("ports") or []:
            if entry.get("name") == port:
                return int(entry["containerPort"])
        return int(port)

    # --- stopping --------------------------------------------------------------------------------

    async def _stop_processes(self, run: _PodRun, grace: float) -> None:
        processes = run.live_processes()
        if not processes:
            return
        for process in processes:
            _signal_group(process, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        if grace > 0:
            deadline = time.monotonic() + grace
            for process in processes:
                remaining = max(0.0, deadline - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), remaining)
        for process in processes:
            if process.returncode is None:
                _signal_group(process, signal.SIGKILL)
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                await process.wait()

    async def _terminate(self, run: _PodRun, grace: int) -> None:
        """Graceful deletion: stop the processes, then remove the pod (unless finalizers hold it)."""
        pod = self._current(run)
        if pod is not None:
            for container in run.containers:
                if container.process is not None:
                    record_event(
                        self.api, pod, "Normal", "Killing", f"Stopping container {container.name}", "kubelet"
                    )
        await self._stop_processes(run, grace)
        if run.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(run.task), 1.0)
        for container in run.containers:
            container.ready = False
        self._write_status(run)
        self._finish(run)
        pod = self._current(run)
        if pod is not None and not pod["metadata"].get("finalizers"):
            self.api.remove_now(PODS, pod)

    # --- logs ------------------------------------------------------------------------------------

    def log_source(
        self, pod: dict[str, Any], container_name: str | None, previous: bool
    ) -> tuple[Path, Callable[[], bool]]:
        """The log file of a pod's container and a check whether it may still grow; raises ApiError 400."""
        from .errors import bad_request

        meta, spec = pod["metadata"], pod.get("spec") or {}
        names = [c["name"] for c in spec.get("containers") or []]
        init_names = [c["name"] for c in spec.get("initContainers") or []]
        if not container_name:
            if len(names) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {meta['name']}, choose one of: "
                    f"[{' '.join(names)}]"
                    + (f" or one of the init containers: [{' '.join(init_names)}]" if init_names else "")
                )
            container_name = names[0]
        if container_name not in names and container_name not in init_names:
            raise bad_request(f"container {container_name} is not valid for pod {meta['name']}")
        statuses = (pod.get("status") or {}).get("containerStatuses", []) + (pod.get("status") or {}).get(
            "initContainerStatuses", []
        )
        status = next((s for s in statuses if s.get("name") == container_name), None)
        restart = int((status or {}).get("restartCount", 0))
        directory = self.pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
        if previous:
            if restart == 0:
                raise bad_request(
                    f'previous terminated container "{container_name}" in pod "{meta["name"]}" not found'
                )
            return self.log_path(directory, container_name, restart - 1), lambda: False
        path = self.log_path(directory, container_name, restart)
        if not path.exists():
            waiting = ((status or {}).get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason", "ContainerCreating")
            if reason in ("ErrImagePull", "ImagePullBackOff"):
                raise bad_request(
                    f'container "{container_name}" in pod "{meta["name"]}" is waiting to start: '
                    f"trying and failing to pull image: {waiting.get('message', '')}"
                )
            raise bad_request(
                f'container "{container_name}" in pod "{meta["name"]}" is waiting to start: {reason}'
            )
        uid = meta["uid"]

        def running() -> bool:
            run = self.runs.get(uid)
            if run is None:
                return False
            container = run.container(container_name or "")
            return (
                container is not None and container.process is not None and container.restart_count == restart
            )

        return path, running


async def _terminated_within(run: _PodRun, seconds: float) -> bool:
    """Wait up to `seconds`; True as soon as the pod is being terminated."""
    try:
        await asyncio.wait_for(run.terminating.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _die_with_cluster() -> None:
    """In the child before exec: be killed if the cluster dies without stopping its pods (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _signal_group(process: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
