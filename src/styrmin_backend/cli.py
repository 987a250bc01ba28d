"""The `styrmin` command: run the server (and, with `up`, everything on one machine)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from styrmin_backend.data_dir import restrict_new_files
from styrmin_backend.logs import configure_logging
from styrmin_backend.settings import Settings

if TYPE_CHECKING:
    from styrmin_backend.bootstrap import Prepared

# Each command imports what it runs: `styrmin agent` needs neither the server's app (FastAPI, its
# routes and pages) nor its database code, which would stay in the agent's memory for its whole life.

# Plain tracebacks: Rich would wrap them at 80 columns in a log file, splitting paths.
app = typer.Typer(
    help="Styrmin control plane.", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console(stderr=True, soft_wrap=True)  # never wrap: URLs, paths and commands stay whole
log = logging.getLogger("styrmin.server")


def _serve(settings: Settings, host: str | None, port: int | None) -> None:
    if host:
        settings.host = host
    if port is not None:
        settings.port = port
    from styrmin_backend.api.serving import serve_until_stopped
    from styrmin_backend.server_app import create_app

    configure_logging(settings.log_level, settings.log_format)
    prepared = prepare_or_exit(settings, console)
    for line in _start_lines(settings, prepared):
        if settings.log_format == "json":
            log.info(line)
        else:
            console.print(line)
    serve_until_stopped(create_app(settings, prepared.engine), settings)


def prepare_or_exit(settings: Settings, console: Console) -> Prepared:
    """``prepare_database``; a missing or wrong secret key ends the command with what to do, no traceback."""
    from styrmin_backend.bootstrap import prepare_database
    from styrmin_backend.domain.errors import SecretKeyWrong
    from styrmin_backend.store.secret_box import SecretKeyProblem

    try:
        return prepare_database(settings)
    except (SecretKeyProblem, SecretKeyWrong) as error:
        console.print(f"Styrmin cannot start: {error}", markup=False)
        raise typer.Exit(1) from None


def _start_lines(settings: Settings, prepared: Prepared) -> list[str]:
    """What the server says on start: where it serves and how to log in.

    A generated admin password is shown once, on a terminal only: with JSON logs (read by a log
    collector) the lines point at the password file instead.
    """
    url = settings.effective_public_url
    lines = [f"Styrmin serves on {url}  (API docs: {url}/api/docs)"]
    first = prepared.first_admin
    if first and first.generated_password and settings.log_format == "text":
        lines.append(
            f"Log in as [bold]admin[/] with password [bold]{first.generated_password}[/] "
            f"(shown once; also in {first.password_file})"
        )
    elif first and first.generated_password:
        lines.append(f"Log in as admin with the password in {first.password_file} (shown there once).")
    elif first:
        lines.append("Log in as admin with the password from STYRMIN_ADMIN_PASSWORD.")
    else:
        lines.append(f"Log in as admin (first password in {settings.data_dir / 'admin-password.txt'}).")
    return lines


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
    server_settings = Settings()
    configure_logging(server_settings.log_level, server_settings.log_format)

    if settings.metrics_port:
        from prometheus_client import start_http_server

        from styrmin_backend.metrics import AGENT_REGISTRY

        start_http_server(settings.metrics_port, registry=AGENT_REGISTRY)

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
    from styrmin_backend.secret_keys import use_settings_keys
    from styrmin_backend.store.db import make_engine
    from styrmin_backend.store.migrate import migration_lock, upgrade_database
    from styrmin_backend.store.secret_box import SecretKeyProblem

    settings = Settings()
    engine = make_engine(settings.effective_database_url)
    try:
        use_settings_keys(engine, settings)
    except SecretKeyProblem as error:
        console.print(f"Cannot migrate: {error}", markup=False)
        raise typer.Exit(1) from None
    with migration_lock(engine):
        upgrade_database(engine)
    console.print("The database schema is current.")


@db_app.command("reencrypt-secrets")
def db_reencrypt_secrets() -> None:
    """Encrypt every stored secret value again with the first key of STYRMIN_SECRET_KEY (after a rotation)."""
    from styrmin_backend.domain.errors import SecretKeyWrong
    from styrmin_backend.secret_keys import use_settings_keys
    from styrmin_backend.store.db import make_engine
    from styrmin_backend.store.secret_box import SecretKeyProblem, reencrypt_secret_values

    settings = Settings()
    engine = make_engine(settings.effective_database_url)
    try:
        use_settings_keys(engine, settings)
        written = reencrypt_secret_values(engine)
    except (SecretKeyProblem, SecretKeyWrong) as error:
        console.print(f"Cannot encrypt again: {error}", markup=False)
        raise typer.Exit(1) from None
    console.print(f"Encrypted the secret values of {written} rows with the first key; the other keys may go.")


if __name__ == "__main__":
    app()
