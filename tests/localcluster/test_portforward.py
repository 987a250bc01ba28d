"""`kubectl port-forward` (this machine's kubectl) to pods and Services of the local cluster."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from styrmin_localcluster import LocalCluster

from .conftest import wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH on this machine"),
]

# Serves GET /NAME?size=N on 127.0.0.1:PORT, answering with the pod's name, the path and N bytes of "x".
HTTP_SERVER = """
import http.server, sys, urllib.parse
pod, port = sys.argv[1], int(sys.argv[2])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        size = int(urllib.parse.parse_qs(url.query).get("size", ["0"])[0])
        body = f"{pod} says hello to {url.path}\\n".encode() + b"x" * size
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PortForward:
    """A running `kubectl port-forward`, with everything it printed collected in the background."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        for stream in (process.stdout, process.stderr):
            threading.Thread(target=self._collect, args=(stream,), daemon=True).start()

    def _collect(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.put(line)

    def _drain(self) -> str:
        while True:
            try:
                self.output.append(self.lines.get_nowait())
            except queue.Empty:
                return "".join(self.output)

    def local_port(self) -> int:
        """Waits (generously) for kubectl's "Forwarding from 127.0.0.1:PORT" line."""
        found = wait_for(
            lambda: re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", self._drain())
            or (self.process.poll() is not None and "exited"),
            timeout=60,
            message="kubectl port-forward to start listening",
        )
        assert found != "exited", f"kubectl port-forward ended early:\n{self._drain()}"
        return int(found.group(1))

    def printed(self) -> str:
        return self._drain()


@pytest.fixture
def port_forward(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[Callable[..., PortForward]]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path)}
    started: list[PortForward] = []

    def start(*args: str) -> PortForward:
        process = subprocess.Popen(
            [KUBECTL or "kubectl", "-n", namespace, "port-forward", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        forward = PortForward(process)
        started.append(forward)
        return forward

    yield start
    for forward in started:
        forward.process.kill()
        forward.process.wait(timeout=30)


@pytest.fixture
def kubectl(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Callable[..., str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path)}

    def run(*args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [KUBECTL or "kubectl", "-n", namespace, *args],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stderr}"
        return result.stdout

    return run


def _start_http_pod(kubectl: Callable[..., str], name: str, port: int) -> None:
    """A pod whose process serves HTTP on 127.0.0.1:port, and a Service `name` in front of it (port 80)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "example.com/tools/python:3.11",
                    "command": ["python", "-c", HTTP_SERVER, name, str(port)],
                    "ports": [{"name": "http", "containerPort": port}],
                }
            ]
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": "http"}]},
    }
    kubectl("apply", "-f", "-", stdin=f"{json.dumps(pod)}\n---\n{json.dumps(service)}\n")
    wait_for(
        lambda: kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}") == "Running",
        timeout=60,
        message=f"pod {name} to run",
    )

    def serving() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return True
        except OSError:
            return False

    wait_for(serving, timeout=60, message=f"pod {name} to listen on {port}")


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return str(response.read().decode())


def test_port_forward_to_a_pod_and_to_a_service(
    kubectl: Callable[..., str], port_forward: Callable[..., PortForward]
) -> None:
    pod_port = _free_port()
    _start_http_pod(kubectl, "echo", pod_port)

    to_pod = port_forward("pod/echo", f":{pod_port}")
    local = to_pod.local_port()
    assert _get(local, "/first") == "echo says hello to /first\n"
    # Every connection gets its own pair of streams on the same SPDY connection.
    assert _get(local, "/second") == "echo says hello to /second\n"
    big = _get(local, "/big?size=3000000")
    assert big == "echo says hello to /big\n" + "x" * 3_000_000
    assert "Handling connection for" in to_pod.printed()

    # kubectl picks the Service's pod by its selector and the pod port from the Service's targetPort.
    to_service = port_forward("svc/echo", ":80")
    assert _get(to_service.local_port(), "/via-service") == "echo says hello to /via-service\n"
    assert f"-> {pod_port}" in to_service.printed()


def test_port_forward_to_a_port_nobody_listens_on_reports_the_failure(
    kubectl: Callable[..., str], port_forward: Callable[..., PortForward]
) -> None:
    pod_port = _free_port()
    _start_http_pod(kubectl, "lonely", pod_port)
    closed_port = _free_port()

    forward = port_forward("pod/lonely", f":{closed_port}")
    local = forward.local_port()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _get(local, "/")
    message = wait_for(
        lambda: "connection refused" in forward.printed() and forward.printed(),
        timeout=60,
        message="kubectl to report the refused connection",
    )
    assert f"error forwarding port {closed_port} to pod" in message

    # Whatever kubectl does next, the cluster serves on: kill it and forward again, to the open port.
    forward.process.kill()
    forward.process.wait(timeout=30)
    assert "lonely" in kubectl("get", "pods")
    again = port_forward("pod/lonely", f":{pod_port}")
    assert _get(again.local_port(), "/again") == "lonely says hello to /again\n"

