"""`kubectl port-forward` (this machine's kubectl) to pods and Services of the local cluster."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from styrmin_localcluster import LocalCluster, portforward, spdy
from tests.support.kubectl import KUBECTL, PortForward, run_kubectl, start_port_forward
from tests.support.loopback import free_port
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH on this machine"),
]

# Serves GET /NAME?size=N on 127.0.0.1:PORT, answering with the pod's name, the path and N bytes of "x";
# answers a POST with the size and SHA-256 of what it received.
HTTP_SERVER = """
import hashlib, http.server, sys, urllib.parse
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
    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        body = f"{pod} got {len(data)} bytes {hashlib.sha256(data).hexdigest()}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.fixture
def port_forward(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., PortForward]]:
    started: list[PortForward] = []

    def start(*args: str) -> PortForward:
        forward = start_port_forward(cluster.kubeconfig_path, tmp_path, namespace, *args)
        started.append(forward)
        return forward

    yield start
    for forward in started:
        forward.stop()


@pytest.fixture
def kubectl(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Callable[..., str]:
    def run(*args: str, stdin: str | None = None) -> str:
        return run_kubectl(cluster.kubeconfig_path, tmp_path, namespace, *args, stdin=stdin).stdout

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
    pod_port = free_port()
    _start_http_pod(kubectl, "echo", pod_port)

    to_pod = port_forward("pod/echo", f":{pod_port}")
    local = to_pod.local_port()
    assert _get(local, "/first") == "echo says hello to /first\n"
    # Every connection gets its own pair of streams on the same SPDY connection.
    assert _get(local, "/second") == "echo says hello to /second\n"
    big = _get(local, "/big?size=3000000")
    assert big == "echo says hello to /big\n" + "x" * 3_000_000
    # An upload larger than the server buffers for the pods arrives whole.
    upload = os.urandom(6 * 1024 * 1024)
    posted = urllib.request.urlopen(
        urllib.request.Request(f"http://127.0.0.1:{local}/up", data=upload), timeout=60
    )
    assert posted.read().decode() == f"echo got {len(upload)} bytes {hashlib.sha256(upload).hexdigest()}"
    assert "Handling connection for" in to_pod.printed()

    # kubectl picks the Service's pod by its selector and the pod port from the Service's targetPort.
    to_service = port_forward("svc/echo", ":80")
    assert _get(to_service.local_port(), "/via-service") == "echo says hello to /via-service\n"
    assert f"-> {pod_port}" in to_service.printed()


def test_port_forward_to_a_port_nobody_listens_on_reports_the_failure(
    kubectl: Callable[..., str], port_forward: Callable[..., PortForward]
) -> None:
    pod_port = free_port()
    _start_http_pod(kubectl, "lonely", pod_port)
    closed_port = free_port()

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


class SpdyClient:
    """A bare SPDY/3.1 client on a TLS connection to the cluster, to see the server's limits and answers."""

    def __init__(self, kubeconfig: Path, path: str, token: str | None = None) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        token = token if token is not None else config["users"][0]["user"]["token"]
        context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
        self.sock = context.wrap_socket(
            socket.create_connection((host, int(port)), timeout=30), server_hostname=host
        )
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            head += chunk
        self.head, _, rest = head.partition(b"\r\n\r\n")
        self.body = rest
        self.reader = spdy.FrameReader()
        self.writer = spdy.FrameWriter()
        self.frames: list[spdy.Frame] = (
            self.reader.feed(rest) if self.head.startswith(b"HTTP/1.1 101") else []
        )

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next_frame(self) -> spdy.Frame | None:
        """The next frame, or None once the server has closed the connection."""
        while not self.frames:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.frames += self.reader.feed(chunk)
        return self.frames.pop(0)

    def close(self) -> None:
        self.sock.close()


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/portforward"


def test_port_forward_upgrade_needs_the_token_and_a_running_pod(
    cluster: LocalCluster, namespace: str, kubectl: Callable[..., str]
) -> None:
    refused = SpdyClient(cluster.kubeconfig_path, _pod_path(namespace, "nobody"), token="wrong")
    assert refused.head.startswith(b"HTTP/1.1 401")
    refused.close()
    missing = SpdyClient(cluster.kubeconfig_path, _pod_path(namespace, "nobody"))
    assert missing.head.startswith(b"HTTP/1.1 404")
    assert json.loads(missing.body)["message"] == 'pods "nobody" not found'
    missing.close()
    pod_port = free_port()
    _start_http_pod(kubectl, "upgraded", pod_port)
    accepted = SpdyClient(cluster.kubeconfig_path, _pod_path(namespace, "upgraded"))
    assert accepted.head.startswith(b"HTTP/1.1 101")
    assert b"x-stream-protocol-version: portforward.k8s.io" in accepted.head.lower()
    # The server answers the client's pings, as the kubelet does.
    accepted.send(accepted.writer.ping(7))
    pong = accepted.next_frame()
    assert isinstance(pong, spdy.ControlFrame) and pong.kind == spdy.PING and pong.value == 7
    accepted.close()


def test_port_forward_limits_streams_and_frame_sizes(
    cluster: LocalCluster, namespace: str, kubectl: Callable[..., str]
) -> None:
    pod_port = free_port()
    _start_http_pod(kubectl, "limited", pod_port)
    client = SpdyClient(cluster.kubeconfig_path, _pod_path(namespace, "limited"))
    # Error streams whose data streams never come: each is answered, until the connection holds the most
    # streams it allows; the next one is refused.
    for index in range(portforward.MAX_STREAMS + 1):
        headers = {"streamtype": "error", "port": str(pod_port), "requestid": str(index)}
        client.send(client.writer.syn_stream(2 * index + 1, headers))
    answers = [client.next_frame() for _ in range(portforward.MAX_STREAMS + 1)]
    kinds = [frame.kind for frame in answers if isinstance(frame, spdy.ControlFrame)]
    assert kinds == [spdy.SYN_REPLY] * portforward.MAX_STREAMS + [spdy.RST_STREAM]
    last = answers[-1]
    assert isinstance(last, spdy.ControlFrame) and last.value == spdy.REFUSED_STREAM
    # A frame larger than the server accepts ends the connection with GOAWAY.
    client.send(struct.pack(">II", 2 * portforward.MAX_STREAMS + 3, spdy.MAX_DATA_FRAME + 1))
    goaway = client.next_frame()
    assert isinstance(goaway, spdy.ControlFrame) and goaway.kind == spdy.GOAWAY
    assert goaway.value == spdy.GOAWAY_PROTOCOL_ERROR
    assert client.next_frame() is None
    client.close()
    assert "limited" in kubectl("get", "pods")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_port_forward_on_the_pods_own_port_like_the_seed(
    kubectl: Callable[..., str], port_forward: Callable[..., PortForward]
) -> None:
    # The seed's `kubectl port-forward svc/prefect-server 4200:4200`: the pod's process already holds
    # 127.0.0.1:4200 (pods share this machine's loopback), so kubectl listens on [::1] only and both
    # addresses reach the pod.
    pod_port = free_port()
    _start_http_pod(kubectl, "same", pod_port)
    forward = port_forward("svc/same", f"{pod_port}:80")
    wait_for(
        lambda: (
            f"Forwarding from [::1]:{pod_port}" in forward.printed() or forward.process.poll() is not None
        ),
        timeout=60,
        message="kubectl port-forward to listen on [::1]",
    )
    assert forward.process.poll() is None, forward.printed()
    with urllib.request.urlopen(f"http://[::1]:{pod_port}/v6", timeout=30) as response:
        assert response.read().decode() == "same says hello to /v6\n"
    assert _get(pod_port, "/v4") == "same says hello to /v4\n"
    assert "Handling connection for" in forward.printed()
