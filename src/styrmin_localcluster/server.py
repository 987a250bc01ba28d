"""One running local cluster: API server, controllers, kubelet and HTTP server in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from . import crds
from .api_http import HttpApi
from .apiserver import NAMESPACES, ApiServer
from .catalog import ImageCatalog
from .daemonsets import DaemonSetController
from .deployments import DeploymentController, ReplicaSetController
from .errors import ApiError
from .garbage import GarbageCollector
from .jobs import JobController
from .kubeconfig import write_kubeconfig
from .kubelet import Kubelet
from .portforward import PortForwarder, http_protocol
from .state import load_state, save_state
from .statefulsets import StatefulSetController
from .tls import ensure_certificates

log = logging.getLogger("styrmin_localcluster")

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# A state file is written at most this often while objects change, and once more on stop.
SAVE_INTERVAL = 1.0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the command decides what a signal means."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ClusterServer:
    """Serves a local cluster on loopback until `stop()`; build it and `await serve()` in an event loop."""

    def __init__(
        self,
        data_dir: Path,
        catalog_dirs: list[Path],
        state_file: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.state_file = Path(state_file) if state_file else None
        self.host = host
        self.port = port
        self.kubeconfig_path = Path(kubeconfig_path) if kubeconfig_path else self.data_dir / "kubeconfig"
        self.token = token if token is not None else self._stable_token()
        self.url = ""
        ca_path, self._cert_path, self._key_path = ensure_certificates(self.data_dir / "tls")
        self.ca_pem = ca_path.read_bytes()
        self.catalog = ImageCatalog([Path(d) for d in catalog_dirs])
        self.api = ApiServer()
        self.api.on_crd_change = lambda crd, removed: crds.sync_crd(
            self.api.registry, crd, removed, self.api.store
        )
        self.kubelet = Kubelet(
            self.api, self.catalog, self.data_dir, lambda: self.url, token=self.token, ca_pem=self.ca_pem
        )
        self.controllers = [
            DeploymentController(self.api),
            ReplicaSetController(self.api),
            StatefulSetController(self.api),
            DaemonSetController(self.api),
            JobController(self.api),
        ]
        self.gc = GarbageCollector(self.api, self.ca_pem.decode())
        self._state_dirty = False
        self.api.store.add_change_hook(self._mark_dirty)
        self._stopping: asyncio.Event | None = None
        self._server: _Server | None = None
        self.started: asyncio.Event | None = None

    def _stable_token(self) -> str:
        """The bearer token, kept in the data folder so that a restart keeps old kubeconfigs valid."""
        path = self.data_dir / "token"
        if path.exists():
            return path.read_text().strip()
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token)
        return token

    def _mark_dirty(self) -> None:
        self._state_dirty = True

    def _restore(self) -> None:
        snapshot = load_state(self.state_file) if self.state_file else None
        if snapshot is not None:
            self.api.store.restore(snapshot)
            for crd in self.api.store.list(("apiextensions.k8s.io", "customresourcedefinitions")):
                crds.sync_crd(self.api.registry, crd, False)
            self.api.rebuild_indexes()
            log.info("restored %d objects from %s", len(snapshot.get("objects", [])), self.state_file)
        for name in SYSTEM_NAMESPACES:
            if self.api.store.get(NAMESPACES, "", name) is None:
                self.api.create(
                    self.api.type_for(NAMESPACES),
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                )
        if self.api.store.get(("", "services"), "default", "kubernetes") is None:
            with contextlib.suppress(ApiError):
                self.api.create(
                    self.api.type_for(("", "services")),
                    "default",
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {
                            "name": "kubernetes",
                            "labels": {"component": "apiserver", "provider": "kubernetes"},
                        },
                        "spec": {
                            "clusterIP": "10.96.0.1",
                            "ports": [{"name": "https", "port": 443, "targetPort": 6443}],
                        },
                    },
                )

    def save(self) -> None:
        if self.state_file is not None:
            save_state(self.state_file, self.api.store.snapshot())
            self._state_dirty = False

    async def _save_periodically(self) -> None:
        while True:
            await asyncio.sleep(SAVE_INTERVAL)
            if self._state_dirty:
                snapshot = self.api.store.snapshot()
                self._state_dirty = False
                assert self.state_file is not None
                await asyncio.to_thread(save_state, self.state_file, snapshot)

    async def serve(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Run until `stop()` is called; `on_ready(url)` is called once the API answers."""
        self._stopping = asyncio.Event()
        self.started = asyncio.Event()
        self._restore()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self.url = f"https://{self.host}:{self.port}"
        app = HttpApi(self.api, self.kubelet, self.token, lambda: f"{self.host}:{self.port}")
        forwarder = PortForwarder(self.api, self.token)
        config = uvicorn.Config(
            app,
            log_level="warning",
            log_config=None,
            lifespan="off",
            timeout_graceful_shutdown=1,
            access_log=False,
            http=http_protocol(forwarder),
            ws="none",
            ssl_certfile=str(self._cert_path),
            ssl_keyfile=str(self._key_path),
        )
        self._server = _Server(config)
        tasks: list[asyncio.Task[Any]] = []
        self.kubelet.start()
        tasks += [asyncio.create_task(c.run()) for c in self.controllers]
        tasks.append(asyncio.create_task(self.gc.run()))
        if self.state_file is not None:
            tasks.append(asyncio.create_task(self._save_periodically()))
        server_task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if server_task.done():
                server_task.result()
            await asyncio.sleep(0.005)
        write_kubeconfig(self.kubeconfig_path, self.url, self.token, self.ca_pem)
        self.started.set()
        if on_ready is not None:
            on_ready(self.url)
        log.info("local cluster serving on %s (kubeconfig %s)", self.url, self.kubeconfig_path)
        try:
            await self._stopping.wait()
        finally:
            self._server.should_exit = True
            forwarder.close_all()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server_task, 5)
            await self.kubelet.shutdown()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.save()
            sock.close()

    def stop(self) -> None:
        """Ask `serve()` to end (call from the server's event loop)."""
        if self._stopping is not None:
            self._stopping.set()
