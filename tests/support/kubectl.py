"""Running this machine's `kubectl` against a cluster's kubeconfig, for tests that check what a user would."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from tests.support.waiting import wait_for

KUBECTL = shutil.which("kubectl")
"""The machine's kubectl, or None where it is not installed (tests using it skip then)."""


class PortForward:
    """A running `kubectl port-forward`, with everything it printed collected in the background."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        for stream in (process.stdout, process.stderr):
            threading.Thread(target=self._collect, args=(stream,), daemon=True).start()

    def _collect(self, stream: IO[str] | None) -> None:
        for line in stream or ():
            self.lines.put(line)

    def _drain(self) -> str:
        while True:
            try:
                self.output.append(self.lines.get_nowait())
            except queue.Empty:
                return "".join(self.output)

    def local_port(self, timeout: float = 60.0) -> int:
        """The local port, once kubectl printed its "Forwarding from 127.0.0.1:PORT" line (waits generously)."""
        try:
            port: int = wait_for(
                self._forwarded_port,
                timeout=timeout,
                message='kubectl port-forward\'s "Forwarding from" line',
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}; kubectl printed:\n{self._drain()}") from None
        return port

    def _forwarded_port(self) -> int | None:
        """The local port kubectl printed, None while it has not yet; fails once kubectl ended without one."""
        found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", self._drain())
        if found:
            return int(found.group(1))
        if self.process.poll() is not None:
            raise AssertionError("kubectl port-forward ended early")
        return None

    def printed(self) -> str:
        """Everything kubectl printed so far."""
        return self._drain()

    def stop(self) -> None:
        """End kubectl."""
        self.process.kill()
        self.process.wait(timeout=30)


def kubectl_env(kubeconfig: Path, home: Path) -> dict[str, str]:
    """The environment of a kubectl run against ``kubeconfig``, with a home of its own (no cache shared)."""
    return {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}


def run_kubectl(
    kubeconfig: Path, home: Path, namespace: str, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run `kubectl -n NAMESPACE ARGS...` to its end (a minute at most); fails on a non-zero exit if ``check``."""
    result = subprocess.run(
        [KUBECTL or "kubectl", "-n", namespace, *args],
        input=stdin,
        env=kubectl_env(kubeconfig, home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def start_port_forward(kubeconfig: Path, home: Path, namespace: str, *args: str) -> PortForward:
    """Start `kubectl -n NAMESPACE port-forward ARGS...`; stop it with :meth:`PortForward.stop`."""
    process = subprocess.Popen(
        [KUBECTL or "kubectl", "-n", namespace, "port-forward", *args],
        env=kubectl_env(kubeconfig, home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return PortForward(process)


@contextmanager
def port_forward(kubeconfig: Path, home: Path, namespace: str, *args: str) -> Iterator[PortForward]:
    """`kubectl port-forward` running for the ``with`` block."""
    forward = start_port_forward(kubeconfig, home, namespace, *args)
    try:
        yield forward
    finally:
        forward.stop()
