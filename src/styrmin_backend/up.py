"""`styrmin up`: the whole system on one machine with embedded defaults.

The server on SQLite, the embedded local cluster (reached only through the kubeconfig it writes),
a local Prefect server, and an agent, all in the data dir; the example driver is loaded. This is the
one module of styrmin_backend that may import styrmin_localcluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

import uvicorn
from pydantic import SecretStr
from rich.console import Console

from styrmin_backend.agent.loop import Agent
from styrmin_backend.agent.prefect import LocalPrefectServer
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.api import create_app
from styrmin_backend.bootstrap import Prepared, prepare_database
from styrmin_backend.drivers import DriverError, read_driver, validate_driver
from styrmin_backend.services import agents, drivers
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_session_factory, transaction
from styrmin_localcluster import LocalCluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "drivers"
LOCAL_CLUSTER = "local"
log = logging.getLogger("styrmin.up")


def _port_or_free(port: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


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


async def _serve(settings: Settings, prepared: Prepared, agent_settings: AgentSettings) -> None:
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, prepared.engine),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=False,  # the agent polls every half second: access lines would drown the rest
        )
    )
    stop = asyncio.Event()
    agent = asyncio.create_task(Agent(agent_settings).run(stop))
    try:
        await server.serve()  # until Ctrl-C or SIGTERM
    finally:
        stop.set()
        await agent


def run_up(settings: Settings, console: Console) -> None:
    """Start everything, print how to reach it, and run until interrupted."""
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    prepared = prepare_database(settings)
    data = settings.data_dir
    settings.public_url = settings.public_url or f"http://{settings.host}:{settings.port}"
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            LocalCluster(
                data / "cluster",
                [p / "catalog" for p in EXAMPLES.glob("*") if (p / "catalog").is_dir()],
                state_file=data / "cluster" / "state.json",
            )
        )
        prefect = LocalPrefectServer(data / "prefect", port=_port_or_free(4200))
        prefect.start()
        stack.callback(prefect.stop)
        settings.prefect_ui_url = prefect.url
        with transaction(make_session_factory(prepared.engine)) as session:
            key = agents.rotate_agent_key(session, "local", LOCAL_CLUSTER)
        load_example_drivers(prepared, console)
        agent_settings = AgentSettings(
            server_url=settings.effective_public_url,
            key=SecretStr(key),
            kubeconfig=cluster.kubeconfig_path,
            prefect_api_url=prefect.api_url,
            data_dir=data / "agent",
        )
        url = settings.effective_public_url
        console.print(f"[bold]Styrmin[/] is up: {url}  (API docs: {url}/api/docs)")
        if prepared.first_admin and prepared.first_admin.generated_password:
            console.print(
                f"Log in as [bold]admin[/] with password [bold]{prepared.first_admin.generated_password}[/] "
                f"(shown once; also in {prepared.first_admin.password_file})"
            )
        else:
            console.print(
                f"Log in as [bold]admin[/] (first password: {data / 'admin-password.txt'}, or STYRMIN_ADMIN_PASSWORD)."
            )
        console.print(f"Prefect UI: {prefect.url}")
        console.print(f"Local cluster: export KUBECONFIG={cluster.kubeconfig_path}; kubectl get pods -A")
        asyncio.run(_serve(settings, prepared, agent_settings))
