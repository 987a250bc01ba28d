"""``styrminctl agents``: make an agent for a cluster and print how to install it (administrators)."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from styrmin.cli._common import ListOutputOption, OutputOption, YesOption, confirm, handle_errors, state
from styrmin.cli.output import ListFormat, OutputFormat, emit, emit_names, is_machine, make_console
from styrmin.cli.render import agents_table

app = typer.Typer(help="Agents, one or more per cluster (needs the Admin role).", no_args_is_help=True)

CHART = "oci://ghcr.io/styrmin/charts/styrmin"
"""Where Styrmin's chart is published; from a checkout, pass --chart deploy/chart."""

AGENT_SECRET = "styrmin-agent"  # noqa: S105 - the name of a Secret, not a secret
"""The Secret the chart's agent reads its key from by default (agent.key.existingSecret)."""
AGENT_SECRET_KEY = "key"  # noqa: S105 - the name of a key in that Secret
"""The key of that Secret by default (agent.key.secretKey)."""


def secret_line(
    key: str, *, namespace: str, secret: str = AGENT_SECRET, secret_key: str = AGENT_SECRET_KEY
) -> str:
    """The kubectl command that stores ``key`` in the Secret the chart's agent reads it from."""
    return shlex.join(
        [
            "kubectl",
            "create",
            "secret",
            "generic",
            secret,
            "-n",
            namespace,
            f"--from-literal={secret_key}={key}",
        ]
    )


def install_lines(
    key: str,
    *,
    cluster: str,
    server_url: str,
    prefect_api_url: str | None,
    namespace: str,
    release: str,
    chart: str,
    secret: str = AGENT_SECRET,
    secret_key: str = AGENT_SECRET_KEY,
) -> list[str]:
    """The commands that install an agent with ``key`` into the current kube context's cluster; without
    ``prefect_api_url`` only the Secret's (an agent the chart already runs, as a full install does).

    The key goes into a Secret, never into Helm values (which Helm keeps in plain in its release).
    """
    stored = secret_line(key, namespace=namespace, secret=secret, secret_key=secret_key)
    if prefect_api_url is None:
        return [stored]
    helm = [
        "helm", "install", release, chart, "-n", namespace,
        "--set", "mode=agent",
        "--set", f"agent.cluster={cluster}",
        "--set", f"agent.serverUrl={server_url}",
        "--set", f"agent.prefectApiUrl={prefect_api_url}",
    ]  # fmt: skip
    if secret != AGENT_SECRET:
        helm += ["--set", f"agent.key.existingSecret={secret}"]
    if secret_key != AGENT_SECRET_KEY:
        helm += ["--set", f"agent.key.secretKey={secret_key}"]
    return [shlex.join(["kubectl", "create", "namespace", namespace]), stored, shlex.join(helm)]


@app.command()
@handle_errors
def register(
    name: Annotated[str, typer.Argument(help="The agent's name.", show_default=False)],
    cluster: Annotated[
        str, typer.Option("--cluster", "-c", help="The cluster it serves.", show_default=False)
    ],
    prefect_api_url: Annotated[
        str | None,
        typer.Option(
            "--prefect-api-url",
            help=(
                "The Prefect server's API, as the agent's cluster reaches it (http://HOST:4200/api), for "
                "the helm line that installs the agent. Leave it out for an agent the chart already runs "
                "(a full install): only the line that stores its key is printed."
            ),
            show_default=False,
        ),
    ] = None,
    server_url: Annotated[
        str | None,
        typer.Option(
            "--server-url", help="The server, as the agent's cluster reaches it (default: this URL)."
        ),
    ] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the agent.")] = "styrmin",
    release: Annotated[str, typer.Option("--release", help="Helm release name.")] = "styrmin-agent",
    secret: Annotated[
        str,
        typer.Option("--secret", help="The Secret the agent reads its key from (agent.key.existingSecret)."),
    ] = AGENT_SECRET,
    secret_key: Annotated[
        str, typer.Option("--secret-key", help="The key of that Secret (agent.key.secretKey).")
    ] = AGENT_SECRET_KEY,
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
        secret=secret,
        secret_key=secret_key,
    )
    if is_machine(output):
        emit({"agent": made.agent.model_dump(mode="json"), "key": made.key, "install": lines}, output)
        return
    console = make_console()
    console.print(f"Agent {name} of cluster {cluster} made. Its key is shown only now.", soft_wrap=True)
    console.print(
        "With kubectl pointed at that cluster, run:"
        if prefect_api_url is None
        else "With kubectl and helm pointed at that cluster, run:",
        soft_wrap=True,
    )
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command("list")
@handle_errors
def list_agents(
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster's agents.")] = None,
    output: ListOutputOption = ListFormat.TEXT,
) -> None:
    """List the agents and the cluster of each."""
    with state().client() as client:
        found = client.agents.list(cluster)
    if is_machine(output):
        emit(found, output)
        return
    if output == ListFormat.NAME:
        emit_names("agent", [a.name for a in found])
        return
    if not found:
        make_console().print(
            "No agents match." if cluster else "No agents yet; register one: styrminctl agents register NAME",
            soft_wrap=True,
        )
        return
    make_console().print(agents_table(found, wide=output == ListFormat.WIDE))


@app.command()
@handle_errors
def revoke(
    name: Annotated[str, typer.Argument(help="The agent's name.", show_default=False)], yes: YesOption = False
) -> None:
    """Revoke an agent's key: it claims nothing more (asks first unless --yes)."""
    confirm(f"revoke agent {name}", yes)
    with state().client() as client:
        client.agents.revoke(name)
    make_console().print(f"Agent {name} revoked.", markup=False)
