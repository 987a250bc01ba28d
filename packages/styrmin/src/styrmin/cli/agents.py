"""``styrminctl agents``: make an agent for a cluster and print how to install it (administrators)."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from styrmin.cli._common import OutputOption, handle_errors, state
from styrmin.cli.output import OutputFormat, emit, is_machine, make_console

app = typer.Typer(help="Agents, one or more per cluster (needs the Admin role).", no_args_is_help=True)

CHART = "oci://ghcr.io/styrmin/charts/styrmin"
"""Where Styrmin's chart is published; from a checkout, pass --chart deploy/chart."""


def install_lines(
    key: str, *, cluster: str, server_url: str, prefect_api_url: str, namespace: str, release: str, chart: str
) -> list[str]:
    """The commands that install an agent with ``key`` into the current kube context's cluster.

    The key goes into a Secret, never into Helm values (which Helm keeps in plain in its release).
    """
    secret = [
        "kubectl",
        "create",
        "secret",
        "generic",
        "styrmin-agent",
        "-n",
        namespace,
        f"--from-literal=key={key}",
    ]
    helm = [
        "helm", "install", release, chart, "-n", namespace,
        "--set", "mode=agent",
        "--set", f"agent.cluster={cluster}",
        "--set", f"agent.serverUrl={server_url}",
        "--set", f"agent.prefectApiUrl={prefect_api_url}",
    ]  # fmt: skip
    return [shlex.join(["kubectl", "create", "namespace", namespace]), shlex.join(secret), shlex.join(helm)]


@app.command()
@handle_errors
def register(
    name: Annotated[str, typer.Argument(help="The agent's name.", show_default=False)],
    cluster: Annotated[
        str, typer.Option("--cluster", "-c", help="The cluster it serves.", show_default=False)
    ],
    prefect_api_url: Annotated[
        str,
        typer.Option(
            "--prefect-api-url",
            help="The Prefect server's API, as the agent's cluster reaches it (http://HOST:4200/api).",
            show_default=False,
        ),
    ],
    server_url: Annotated[
        str | None,
        typer.Option(
            "--server-url", help="The server, as the agent's cluster reaches it (default: this URL)."
        ),
    ] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the agent.")] = "styrmin",
    release: Annotated[str, typer.Option("--release", help="Helm release name.")] = "styrmin-agent",
    chart: Annotated[
        str, typer.Option("--chart", help="Styrmin's chart (a folder or an OCI reference).")
    ] = CHART,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Make an agent for a cluster and print its key and the exact commands that install it there."""
    with state().client() as client:
        made = client.agents.create(name, cluster)
        url = server_url or client.url
    lines = install_lines(
        made.key,
        cluster=cluster,
        server_url=url,
        prefect_api_url=prefect_api_url,
        namespace=namespace,
        release=release,
        chart=chart,
    )
    if is_machine(output):
        emit({"agent": made.agent.model_dump(mode="json"), "key": made.key, "install": lines}, output)
        return
    console = make_console()
    console.print(f"Agent {name} of cluster {cluster} made. Its key is shown only now.", soft_wrap=True)
    console.print("With kubectl and helm pointed at that cluster, run:", soft_wrap=True)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command("list")
@handle_errors
def list_agents(output: OutputOption = OutputFormat.TEXT) -> None:
    """List the agents and the cluster of each."""
    with state().client() as client:
        found = client.agents.list()
    if is_machine(output):
        emit(found, output)
        return
    console = make_console()
    for agent in found:
        seen = agent.last_seen_at.isoformat(timespec="seconds") if agent.last_seen_at else "never"
        status = "revoked" if agent.revoked else f"last seen {seen}"
        console.print(f"{agent.name}  cluster {agent.cluster}  {status}", markup=False, soft_wrap=True)


@app.command()
@handle_errors
def revoke(name: Annotated[str, typer.Argument(help="The agent's name.", show_default=False)]) -> None:
    """Revoke an agent's key: it claims nothing more."""
    with state().client() as client:
        client.agents.revoke(name)
    make_console().print(f"Agent {name} revoked.", markup=False)
