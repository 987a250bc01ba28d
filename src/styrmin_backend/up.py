"""`styrmin up`: the whole system on one machine with embedded defaults.

The server on SQLite, the embedded local cluster (reached only through the kubeconfig it writes),
a local Prefect server, and an agent, all in the data dir (see ``styrmin_backend.local``); the
example drivers are loaded.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from pathlib import Path

from rich.console import Console

from styrmin_backend.bootstrap import Prepared, prepare_database
from styrmin_backend.data_dir import restrict_new_files
from styrmin_backend.drivers import DriverError, read_driver, validate_driver
from styrmin_backend.local import LocalStyrmin, run_locally
from styrmin_backend.services import drivers
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_session_factory, transaction

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "drivers"
log = logging.getLogger("styrmin.up")


def load_example_drivers(prepared: Prepared, console: Console) -> None:
    """Push every example driver that validates and is not stored yet."""
    factory = make_session_factory(prepared.engine)
    for folder in sorted(p for p in EXAMPLES.glob("*") if (p / "driver.styrmin.yml").exists()):
        try:
            package = read_driver(folder)
        except DriverError as error:
            console.print(f"[yellow]Example driver {folder.name} not loaded:[/] {error}")
            continue
        report = validate_driver(package)
        if not report.valid:
            console.print(
                f"[yellow]Example driver {package.name}@{package.version} not loaded:[/]\n{report.text()}"
            )
            continue
        with transaction(factory) as session:
            pushed = drivers.push_driver(session, package, report, pushed_by="styrmin up")
        if pushed.created:
            console.print(f"Loaded the example driver {package.name}@{package.version}.")


def _port_or_free(port: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def _stop_on_signals() -> threading.Event:
    """An event that Ctrl-C or SIGTERM sets (from now on, so a signal during start-up is kept too)."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _wait_until_stopped(local: LocalStyrmin, stop: threading.Event) -> None:
    """Block until ``stop`` is set, or until the server stops by itself."""
    while local.alive and not stop.wait(0.5):
        pass


def run_up(settings: Settings, console: Console) -> None:
    """Start everything, print how to reach it, and run until interrupted."""
    restrict_new_files()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = _stop_on_signals()
    catalogs = [p / "catalog" for p in EXAMPLES.glob("*") if (p / "catalog").is_dir()]
    prepared = prepare_database(settings)
    load_example_drivers(prepared, console)
    with run_locally(
        settings,
        catalogs=catalogs,
        keep_cluster_state=True,
        prefect_port=_port_or_free(4200),
        prepared=prepared,
    ) as local:
        url = local.url
        console.print(f"[bold]Styrmin[/] is up: {url}  (API docs: {url}/api/docs)")
        first_admin = local.prepared.first_admin
        if first_admin and first_admin.generated_password:
            console.print(
                f"Log in as [bold]admin[/] with password [bold]{first_admin.generated_password}[/] "
                f"(shown once; also in {first_admin.password_file})"
            )
        else:
            console.print(
                f"Log in as [bold]admin[/] (first password: {settings.data_dir / 'admin-password.txt'}, "
                "or STYRMIN_ADMIN_PASSWORD)."
            )
        console.print(f"Prefect UI: {local.prefect.url}")
        console.print(
            f"Local cluster: export KUBECONFIG={local.cluster.kubeconfig_path}; kubectl get pods -A"
        )
        _wait_until_stopped(local, stop)
        console.print("Stopping Styrmin...")
