"""The `styrmin` command: run the server (and, with `up`, everything on one machine)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
import uvicorn
from rich.console import Console

from styrmin_backend.api import create_app
from styrmin_backend.bootstrap import prepare_database
from styrmin_backend.data_dir import restrict_new_files
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_engine
from styrmin_backend.store.migrate import upgrade_database

# Plain tracebacks: Rich would wrap them at 80 columns in a log file, splitting paths.
app = typer.Typer(
    help="Styrmin control plane.", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console(stderr=True)


def _serve(settings: Settings, host: str | None, port: int | None) -> None:
    if host:
        settings.host = host
    if port is not None:
        settings.port = port
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    prepared = prepare_database(settings)
    url = settings.effective_public_url
    console.print(f"[bold]Styrmin[/] serves on {url}  (API docs: {url}/api/docs)")
    if prepared.first_admin and prepared.first_admin.generated_password:
        console.print(
            f"Log in as [bold]admin[/] with password [bold]{prepared.first_admin.generated_password}[/] "
            f"(shown once; also in {prepared.first_admin.password_file})"
        )
    elif prepared.first_admin:
        console.print("Log in as [bold]admin[/] with the password from STYRMIN_ADMIN_PASSWORD.")
    else:
        console.print(f"Log in as admin (first password in {settings.data_dir / 'admin-password.txt'}).")
    uvicorn.run(
        create_app(settings, prepared.engine),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
    )


HostOption = Annotated[str | None, typer.Option(help="Bind address (default: STYRMIN_HOST).")]
PortOption = Annotated[int | None, typer.Option(help="Port (default: STYRMIN_PORT).")]


@app.command()
def up(host: HostOption = None, port: PortOption = None) -> None:
    """Run everything on this machine: server (SQLite), local cluster, Prefect server, agent."""
    from styrmin_backend.up import run_up

    settings = Settings()
    if host:
        settings.host = host
    if port is not None:
        settings.port = port
    run_up(settings, console)


@app.command()
def agent() -> None:
    """Run the agent of one cluster (settings: STYRMIN_AGENT_*, see docs/configuration.md)."""
    import asyncio
    import signal

    from styrmin_backend.agent.loop import Agent
    from styrmin_backend.agent.settings import AgentSettings

    settings = AgentSettings()  # type: ignore[call-arg]  # the key comes from the environment
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await Agent(settings).run(stop)

    asyncio.run(main())


@app.command()
def server(host: HostOption = None, port: PortOption = None) -> None:
    """Run the API server (production: set STYRMIN_DATABASE_URL to PostgreSQL)."""
    restrict_new_files()
    _serve(Settings(), host, port)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the database migrations."""
    settings = Settings()
    upgrade_database(make_engine(settings.effective_database_url))
    console.print("The database schema is current.")


if __name__ == "__main__":
    app()
