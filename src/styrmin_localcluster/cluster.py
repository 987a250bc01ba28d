"""`LocalCluster`: start and stop a local cluster from Python (for `styrmin up` and for tests)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

from .kubeconfig import CONTEXT


class LocalClusterError(RuntimeError):
    """The local cluster could not start; the message ends with the end of its log."""


class LocalCluster:
    """A local cluster serving on 127.0.0.1, reached only through the kubeconfig it writes.

    By default it runs in a subprocess of its own, so that its pods' processes, its HTTP server and its
    controllers never compete with the caller's event loop; `in_process=True` runs it in a thread instead.

        with LocalCluster(tmp / "cluster", [catalog_dir]) as cluster:
            client = lightkube.Client(KubeConfig.from_file(cluster.kubeconfig_path))
    """

    def __init__(
        self,
        data_dir: Path,
        catalog_dirs: list[Path],
        state_file: Path | None = None,
        port: int = 0,
        *,
        in_process: bool = False,
        startup_timeout: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.catalog_dirs = [Path(d) for d in catalog_dirs]
        self.state_file = Path(state_file) if state_file else None
        self.port = port
        self.in_process = in_process
        self.startup_timeout = startup_timeout
        self.kubeconfig_path = self.data_dir / "kubeconfig"
        self.log_path = self.data_dir / "localcluster.log"
        self.context = CONTEXT
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._server: object | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- context manager -------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._thread is not None and self._thread.is_alive()

    # --- starting --------------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Start serving; returns once the API answers and the kubeconfig is written."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.in_process:
            self._start_thread()
        else:
            self._start_process()
        return self

    def _start_process(self) -> None:
        ready_file = self.data_dir / "ready"
        with contextlib.suppress(FileNotFoundError):
            ready_file.unlink()
        argv = [
            sys.executable,
            "-m",
            "styrmin_localcluster",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--ready-file",
            str(ready_file),
            "--exit-with-parent",
        ]
        for folder in self.catalog_dirs:
            argv += ["--catalog", str(folder)]
        if self.state_file is not None:
            argv += ["--state-file", str(self.state_file)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes to it for its whole life
        try:
            # The child imports this very package, even when the caller found it through sys.path alone.
            package_root = str(Path(__file__).resolve().parent.parent)
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if ready_file.exists():
                self.url = ready_file.read_text().strip()
                return
            if self._process.poll() is not None:
                raise LocalClusterError(
                    f"the local cluster exited with code {self._process.returncode} while "
                    f"starting; end of {self.log_path}:\n{self._log_tail()}"
                )
            time.sleep(0.02)
        self.stop()
        raise LocalClusterError(
            f"the local cluster did not answer within {self.startup_timeout:.0f} s; "
            f"end of {self.log_path}:\n{self._log_tail()}"
        )

    def _start_thread(self) -> None:
        from .server import ClusterServer

        server = ClusterServer(
            self.data_dir,
            self.catalog_dirs,
            self.state_file,
            port=self.port,
            kubeconfig_path=self.kubeconfig_path,
        )
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                import uvloop

                loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            except ImportError:
                loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(server.serve(lambda url: ready.set()))
            except BaseException as exc:
                failure.append(exc)
                ready.set()
            finally:
                loop.close()

        self._server = server
        self._thread = threading.Thread(target=run, name="styrmin-localcluster", daemon=True)
        self._thread.start()
        if not ready.wait(self.startup_timeout) or failure:
            raise LocalClusterError(
                f"the local cluster could not start: {failure[0] if failure else 'timeout'}"
            )
        self.url = server.url

    # --- stopping --------------------------------------------------------------------------------

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the cluster and every pod process; with a state file, its objects are saved first."""
        if self._process is not None:
            process, self._process = self._process, None
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        if self._thread is not None:
            thread, self._thread = self._thread, None
            server, loop = self._server, self._loop
            if loop is not None and server is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(server.stop)  # type: ignore[attr-defined]
            thread.join(timeout)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
