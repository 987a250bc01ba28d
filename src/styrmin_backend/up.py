"""`styrmin up`: the whole system on one machine with embedded defaults.

The server on SQLite, the embedded local cluster (reached only through the kubeconfig it writes),
a local Prefect server, and an agent, all in the data dir (see ``styrmin_backend.local``); the
example drivers are loaded.
"""

from __future__ import annotations

import logging
import shlex
import signal
import socket
import sys
import threading
from pathlib import Path

from rich.console import Console
from rich.text import Text
from sqlalchemy.orm import Session, sessionmaker

from styrmin_backend.bootstrap import Prepared, prepare_database
from styrmin_backend.data_dir import restrict_new_files
from styrmin_backend.domain.errors import SecretKeyWrong
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.drivers import DriverError, read_driver, validate_driver
from styrmin_backend.local import LocalStyrmin, run_locally
from styrmin_backend.logs import configure_logging
from styrmin_backend.services import drivers, tasks
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_session_factory, transaction
from styrmin_backend.store.secret_box import SecretKeyProblem

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


def say(console: Console, text: str, *whole: str) -> None:
    """Print ``text``, then each of ``whole`` (a URL, a path or a command) alone on an indented line.

    Never wrapped, whatever the output is (a terminal, a log file, a CI job), so that each can be copied.
    """
    console.print(Text(text), soft_wrap=True)
    for line in whole:
        console.print(Text(f"  {line}"), soft_wrap=True, highlight=False)


def styrminctl_command() -> str:
    """How to run styrminctl from here: through uv in a checkout (as the README does), else by name."""
    root = Path(__file__).resolve().parents[2]
    in_checkout = (root / "uv.lock").is_file() and Path(sys.prefix).resolve() == (root / ".venv").resolve()
    return "uv run --no-dev styrminctl" if in_checkout else "styrminctl"


def _print_how_to_reach(console: Console, settings: Settings, local: LocalStyrmin) -> None:
    url = local.url
    say(console, "Styrmin is up:", url)
    say(console, "API docs:", f"{url}/api/docs")
    first_admin = local.prepared.first_admin
    if first_admin and first_admin.generated_password:
        say(
            console,
            "Log in as admin with this password (shown once; also kept in the file below):",
            first_admin.generated_password,
            str(first_admin.password_file),
        )
    else:
        say(
            console,
            "Log in as admin with the first password (STYRMIN_ADMIN_PASSWORD, or the one kept in):",
            str(settings.data_dir / "admin-password.txt"),
        )
    say(console, "Prefect UI:", local.prefect.url)
    say(
        console,
        "Local cluster (kubectl):",
        f"export KUBECONFIG={local.cluster.kubeconfig_path}",
        "kubectl get pods -A",
    )
    ctl = styrminctl_command()
    login = f"{ctl} login {url} -u admin"
    if first_admin and first_admin.generated_password:
        login += f" --password-stdin < {shlex.quote(str(first_admin.password_file))}"
    say(
        console,
        "Next, in another terminal: log in, then deploy the example driver (README.md walks on from there):",
        login,
        f"{ctl} deployments create shop1 --driver shop --wait",
    )


_STOPPING_REPORT_SECONDS = 10.0
"""How often a stop that waits for running tasks says which are still running."""


def _say_what_stopping_waits_for(console: Console, factory: sessionmaker[Session], prefix: str) -> bool:
    """Say which tasks the agent lets end before it stops; False when none runs."""
    with transaction(factory) as session:
        running = tasks.list_tasks(session, status=TaskStatus.RUNNING, limit=20).items
        named = [f"task #{t.id} ({t.type} of {t.deployment_name})" for t in running]
    if not named:
        if prefix.startswith("Stopping"):
            console.print(
                "Stopping Styrmin: no task runs; stopping the agent, Prefect and the local cluster.",
                soft_wrap=True,
            )
        return False
    console.print(Text(f"{prefix} {len(named)} running task(s) to end: {', '.join(named)}."), soft_wrap=True)
    return True


def _report_while_stopping(
    console: Console, factory: sessionmaker[Session], stopped: threading.Event
) -> None:
    while not stopped.wait(_STOPPING_REPORT_SECONDS):
        if not _say_what_stopping_waits_for(console, factory, "Still waiting for"):
            return


def run_up(settings: Settings, console: Console) -> None:
    """Start everything, print how to reach it, and run until interrupted."""
    restrict_new_files()
    configure_logging(settings.log_level, settings.log_format)  # as `styrmin server` logs
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = _stop_on_signals()
    catalogs = [p / "catalog" for p in EXAMPLES.glob("*") if (p / "catalog").is_dir()]
    try:
        prepared = prepare_database(settings)
    except (SecretKeyProblem, SecretKeyWrong) as error:
        console.print(f"Styrmin cannot start: {error}", markup=False)
        raise SystemExit(1) from None
    load_example_drivers(prepared, console)
    with run_locally(
        settings,
        catalogs=catalogs,
        keep_cluster_state=True,
        prefect_port=_port_or_free(4200),
        prepared=prepared,
    ) as local:
        _print_how_to_reach(console, settings, local)
        _wait_until_stopped(local, stop)
        failed = not stop.is_set()  # the server or the agent ended by itself (the log says which)
        factory = make_session_factory(prepared.engine)
        _say_what_stopping_waits_for(console, factory, "Stopping Styrmin: waiting for")
        stopped = threading.Event()
        threading.Thread(
            target=_report_while_stopping,
            args=(console, factory, stopped),
            name="styrmin-stopping",
            daemon=True,
        ).start()
    stopped.set()
    console.print("Styrmin stopped.", soft_wrap=True)
    if failed:
        raise SystemExit(1)
