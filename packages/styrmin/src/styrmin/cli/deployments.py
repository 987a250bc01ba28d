"""``styrminctl deployments``: create, list, show, upgrade, configure, stop, start, restore and delete."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from styrmin.cli._common import (
    PLAIN_HELP,
    GetOutputOption,
    ListOutputOption,
    OutputOption,
    UsageProblem,
    WaitOption,
    WaitTimeoutOption,
    YesOption,
    complete_deployment,
    confirm,
    handle_errors,
    state,
    stdin_is_terminal,
)
from styrmin.cli.output import GetFormat, ListFormat, OutputFormat, emit, emit_names, is_machine, make_console
from styrmin.cli.preview import DryRunOption, show_preview
from styrmin.cli.progress import finish_change
from styrmin.cli.render import deployment_detail, deployments_table

if TYPE_CHECKING:
    from styrmin import Client
    from styrmin.models import Configuration

app = typer.Typer(
    rich_markup_mode=PLAIN_HELP, help="Deployments: create, change and inspect them.", no_args_is_help=True
)

NameArgument = Annotated[
    str, typer.Argument(help="The deployment's name.", show_default=False, autocompletion=complete_deployment)
]
ComponentsArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Component names (see: styrminctl drivers get).", show_default=False),
]
FileOption = Annotated[
    Path | None,
    typer.Option(
        "--file",
        "-f",
        help="YAML or JSON file with the whole configuration: values, images and env.",
        exists=True,
    ),
]
ValuesOption = Annotated[
    Path | None,
    typer.Option("--values", help="YAML or JSON file with the Helm values (replaces them).", exists=True),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", help="Set one Helm value: PATH=VALUE, with a dotted PATH and a YAML VALUE (repeatable)."
    ),
]
ImageOption = Annotated[
    list[str] | None,
    typer.Option(
        "--image", help='Image of a component: COMPONENT=IMAGE; may use "{{ app.version }}" (repeatable).'
    ),
]
EnvOption = Annotated[
    list[str] | None,
    typer.Option("--env", help="Env var of a component's container: COMPONENT.NAME=VALUE (repeatable)."),
]


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Orders versions as people read them: numbers by value, so 1.10.0 comes after 1.9.0.

    >>> sorted(["1.10.0", "1.9.0", "2.0.0-rc1", "1.9.0a"], key=version_key)
    ['1.9.0', '1.9.0a', '1.10.0', '2.0.0-rc1']
    """
    import re

    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|[^\d.\-+]+", version)
    )


def newest_driver_version(client: Client, driver: str) -> str:
    """The newest pushed version of ``driver``; says which on stderr (stdout stays the result's)."""
    versions = [d.version for d in client.drivers.list(driver) if d.name == driver]
    if not versions:
        raise UsageProblem(f'There is no driver "{driver}"; push it first: styrminctl drivers push FOLDER')
    newest = max(versions, key=version_key)
    others = f", the newest of {len(versions)}" if len(versions) > 1 else ""
    make_console(stderr=True).print(
        f"Using driver {driver}@{newest}{others} (pin one with --driver {driver}@VERSION).",
        markup=False,
        soft_wrap=True,
    )
    return newest


def _empty_configuration() -> Configuration:
    from styrmin.models import Configuration

    return Configuration()


def _read_structured(path: Path, what: str) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageProblem(f"Cannot read {path}: {error.strerror or error}.") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise UsageProblem(
            f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {error}"
        ) from None


def _pair(text: str, option: str, shape: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f'"{text}" is not {shape}.', param_hint=option)
    return key.strip(), value


_UNESCAPED_DOT = re.compile(r"(?<!\\)\.")
_UNESCAPED_COMMA = re.compile(r"(?<!\\),")


def _path_keys(dotted: str, option: str, item: str) -> list[str]:
    """The keys of a dotted path (``server.port``; ``\\.`` is a dot inside a key, as in Helm).

    Raises:
        UsageProblem: a key is empty, or the path indexes a list (``list[0]``), which is not supported.
    """
    keys = [key.replace("\\.", ".") for key in _UNESCAPED_DOT.split(dotted)]
    if any(not key for key in keys):
        raise UsageProblem(
            f'{option} "{item}": the path "{dotted}" has an empty key; a path is keys joined by single '
            "dots, such as server.port."
        )
    indexed = next((key for key in keys if "[" in key or "]" in key), None)
    if indexed is not None:
        raise UsageProblem(
            f'{option} "{item}": "{indexed}" indexes a list, which styrminctl does not support; '
            "set the whole list as YAML instead, such as --set 'hosts=[a, b]'."
        )
    return keys


def _set_value(item: str, raw: str) -> Any:
    """The value of ``--set PATH=VALUE``: ``VALUE`` read as YAML, ``\\,`` a comma in plain text.

    Raises:
        UsageProblem: the value is not valid YAML, or holds a comma that Helm would read as the start
            of another PATH=VALUE (styrminctl takes one a --set).
    """
    import yaml

    if not raw:
        return ""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        reason = getattr(error, "problem", None) or str(error).split("\n", 1)[0]
        raise UsageProblem(
            f'--set "{item}": the value "{raw}" is not valid YAML ({reason}); to set it as text, quote it: '
            f"--set '{item.partition('=')[0]}=\"...\"'."
        ) from None
    if isinstance(value, str) and raw.lstrip()[:1] not in ("'", '"'):
        if _UNESCAPED_COMMA.search(value):
            raise UsageProblem(
                f'--set "{item}": the value holds a comma, which Helm reads as the start of another '
                "PATH=VALUE; give each value its own --set, write \\, for a comma in the text, or quote "
                "the value."
            )
        value = value.replace("\\,", ",")
    return value


def _set_path(values: dict[str, Any], keys: list[str], value: Any) -> None:
    node = values
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _unset_path(values: dict[str, Any], keys: list[str]) -> None:
    node: Any = values
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(keys[-1], None)


def edit_configuration(
    base: Configuration,
    *,
    file: Path | None = None,
    values_file: Path | None = None,
    sets: list[str] | None = None,
    unsets: list[str] | None = None,
    images: list[str] | None = None,
    unset_images: list[str] | None = None,
    envs: list[str] | None = None,
    unset_envs: list[str] | None = None,
) -> Configuration:
    """``base`` with the options applied, in this order: --file, --values, --set/--unset, images, env."""

    from styrmin.models import Configuration

    data: dict[str, Any] = copy.deepcopy(base.model_dump(mode="json"))
    if file is not None:
        loaded = _read_structured(file, "configuration") or {}
        if not isinstance(loaded, dict) or set(loaded) - {"values", "images", "env"}:
            raise UsageProblem(f"{file} must be a mapping with only values, images and env.")
        data = {"values": {}, "images": {}, "env": {}, **loaded}
    if values_file is not None:
        loaded = _read_structured(values_file, "values") or {}
        if not isinstance(loaded, dict):
            raise UsageProblem(f"{values_file} must hold a mapping of Helm values.")
        data["values"] = loaded
    for item in sets or []:
        key, raw = _pair(item, "--set", "PATH=VALUE")
        _set_path(data["values"], _path_keys(key, "--set", item), _set_value(item, raw))
    for key in unsets or []:
        _unset_path(data["values"], _path_keys(key, "--unset", key))
    for item in images or []:
        component, image = _pair(item, "--image", "COMPONENT=IMAGE")
        data["images"][component] = image
    for component in unset_images or []:
        data["images"].pop(component, None)
    for item in envs or []:
        target, value = _pair(item, "--env", "COMPONENT.NAME=VALUE")
        component, dot, name = target.partition(".")
        if not dot or not name:
            raise typer.BadParameter(f'"{item}" is not COMPONENT.NAME=VALUE.', param_hint="--env")
        data["env"].setdefault(component, {})[name] = value
    for target in unset_envs or []:
        component, _, name = target.partition(".")
        env = data["env"].get(component, {})
        env.pop(name, None)
        if not env:
            data["env"].pop(component, None)
    try:
        return Configuration.model_validate(data)
    except Exception as error:
        raise UsageProblem(f"The configuration is not valid: {error}") from None


@app.command()
@handle_errors
def create(
    name: NameArgument,
    driver: Annotated[
        str, typer.Option("--driver", "-d", help="The driver: NAME (its newest version) or NAME@VERSION.")
    ],
    driver_version: Annotated[
        str | None, typer.Option("--driver-version", help="The driver's version.")
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Kubernetes namespace (default: the deployment's name)."),
    ] = None,
    app_version: Annotated[
        str | None, typer.Option("--app-version", help="Application version (default: the driver's).")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="The cluster to deploy to (default: the server's).")
    ] = None,
    file: FileOption = None,
    values: ValuesOption = None,
    set_values: SetOption = None,
    image: ImageOption = None,
    env: EnvOption = None,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
    dry_run: DryRunOption = False,
) -> None:
    """Create a deployment of a driver's application (of the driver's newest version unless named)."""
    if driver_version is None:
        driver, _, driver_version = driver.partition("@")
    elif "@" in driver:
        raise UsageProblem(
            f'--driver "{driver}" names a version, and --driver-version "{driver_version}" another; '
            "give the version once: --driver NAME@VERSION, or --driver NAME --driver-version VERSION."
        )
    configuration = edit_configuration(
        _empty_configuration(), file=file, values_file=values, sets=set_values, images=image, envs=env
    )
    with state().client() as client:
        if not driver_version:
            driver_version = newest_driver_version(client, driver)
        if dry_run:
            show_preview(
                client,
                name,
                "create",
                output,
                namespace=namespace or name,
                driver=driver,
                driver_version=driver_version,
                app_version=app_version,
                configuration=configuration,
                cluster=cluster,
            )
            return
        change = client.deployments.create(
            name,
            namespace=namespace or name,
            driver=driver,
            driver_version=driver_version,
            app_version=app_version,
            configuration=configuration,
            cluster=cluster,
        )
        finish_change(client, "Creating", change, wait, timeout, output)


@app.command("list")
@handle_errors
def list_deployments(
    status: Annotated[
        str | None, typer.Option("--status", help="Only those with this status (running, failed, ...).")
    ] = None,
    driver: Annotated[str | None, typer.Option("--driver", help="Only those of this driver.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only those on this cluster.")] = None,
    output: ListOutputOption = ListFormat.TEXT,
) -> None:
    """List the deployments (filtered by the server)."""
    with state().client() as client:
        found = client.deployments.list(status=status, driver=driver, cluster=cluster)
    if is_machine(output):
        emit(found, output)
    elif output == ListFormat.NAME:
        emit_names("deployment", [d.name for d in found])
    elif not found:
        filtered = status or driver or cluster
        make_console().print(
            "No deployments match."
            if filtered
            else "No deployments yet; create one with: styrminctl deployments create",
            soft_wrap=True,
        )
    else:
        make_console().print(deployments_table(found, wide=output == ListFormat.WIDE))


@app.command()
@handle_errors
def get(name: NameArgument, output: GetOutputOption = GetFormat.TEXT) -> None:
    """Show a deployment: versions, status, configuration and its latest tasks."""
    with state().client() as client:
        deployment = client.deployments.get(name)
        if output == GetFormat.NAME:
            emit_names("deployment", [deployment.name])
            return
        if is_machine(output):
            emit(deployment, output)
            return
        recent = client.tasks.list(deployment=name, limit=5).items
    make_console().print(deployment_detail(deployment, recent), soft_wrap=True)


@app.command()
@handle_errors
def upgrade(
    name: NameArgument,
    app_version: Annotated[
        str | None, typer.Option("--app-version", help="The application version to run.")
    ] = None,
    driver_version: Annotated[
        str | None, typer.Option("--driver-version", help="The driver version to use.")
    ] = None,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
    dry_run: DryRunOption = False,
) -> None:
    """Upgrade the application and/or the driver version (nothing happens if it already runs them)."""
    if app_version is None and driver_version is None:
        raise UsageProblem("Give --app-version, --driver-version or both.")
    with state().client() as client:
        if dry_run:
            versions = {"app_version": app_version, "driver_version": driver_version}
            show_preview(client, name, "upgrade", output, **versions)
            return
        change = client.deployments.upgrade(name, app_version=app_version, driver_version=driver_version)
        finish_change(client, "Upgrading", change, wait, timeout, output)


@app.command("set")
@handle_errors
def set_configuration(
    name: NameArgument,
    file: FileOption = None,
    values: ValuesOption = None,
    set_values: SetOption = None,
    unset: Annotated[
        list[str] | None,
        typer.Option("--unset", help="Remove one Helm value by its dotted PATH (repeatable)."),
    ] = None,
    image: ImageOption = None,
    unset_image: Annotated[
        list[str] | None,
        typer.Option("--unset-image", help="Drop a component's image override (repeatable)."),
    ] = None,
    env: EnvOption = None,
    unset_env: Annotated[
        list[str] | None, typer.Option("--unset-env", help="Remove an env var: COMPONENT.NAME (repeatable).")
    ] = None,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
    dry_run: DryRunOption = False,
) -> None:
    """Change the configuration: starts from the current one (or --file) and applies the options."""
    if not any((file, values, set_values, unset, image, unset_image, env, unset_env)):
        raise UsageProblem(
            "Say what to change: --file, --values, --set, --unset, --image or --env (see --help)."
        )
    with state().client() as client:
        current = client.deployments.get(name).configuration
        configuration = edit_configuration(
            current,
            file=file,
            values_file=values,
            sets=set_values,
            unsets=unset,
            images=image,
            unset_images=unset_image,
            envs=env,
            unset_envs=unset_env,
        )
        if dry_run:
            show_preview(client, name, "configure", output, configuration=configuration)
            return
        change = client.deployments.configure(name, configuration)
        finish_change(client, "Configuring", change, wait, timeout, output)


def _components(client: Any, name: str, components: list[str] | None, all_components: bool) -> list[str]:
    """The components a stop or start names: those given, or with ``--all`` every one of the driver."""
    if all_components and components:
        raise UsageProblem(
            f"Name the components ({', '.join(components)}) or pass --all, not both: "
            "--all means every component of the driver."
        )
    if all_components:
        deployment = client.deployments.get(name)
        driver = client.drivers.get(deployment.driver, deployment.driver_version)
        return [c.name for c in driver.components]
    if not components:
        raise UsageProblem("Name the components, or pass --all.")
    return components


AllOption = Annotated[bool, typer.Option("--all", help="Every component of the deployment's driver.")]


@app.command()
@handle_errors
def stop(
    name: NameArgument,
    components: ComponentsArgument = None,
    all_components: AllOption = False,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Stop components: scale their workloads to zero."""
    with state().client() as client:
        change = client.deployments.stop(name, _components(client, name, components, all_components))
        finish_change(client, "Stopping components of", change, wait, timeout, output)


@app.command()
@handle_errors
def start(
    name: NameArgument,
    components: ComponentsArgument = None,
    all_components: AllOption = False,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Start stopped components again."""
    with state().client() as client:
        change = client.deployments.start(name, _components(client, name, components, all_components))
        finish_change(client, "Starting components of", change, wait, timeout, output)


@app.command()
@handle_errors
def restore(
    name: NameArgument,
    backup: Annotated[
        int, typer.Option("--backup", help="The backup's id (see: styrminctl backups list).", min=1)
    ],
    from_deployment: Annotated[
        str | None,
        typer.Option(
            "--from-deployment",
            help="For a backup of another deployment: its name (its data, configuration and secrets "
            "replace this deployment's).",
            show_default=False,
        ),
    ] = None,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Restore a backup: the application goes back to the backup's version, then its data comes back
    (the data it has now is replaced; asks first unless --yes). A backup of another deployment is
    refused unless --from-deployment names it."""
    with state().client() as client:
        of = ""
        if not yes and stdin_is_terminal():  # the question says whose backup it is: a mistyped id shows
            taken_from = client.backups.get(backup).deployment
            of = "" if taken_from == name else f" (a backup of deployment {taken_from})"
        confirm(f"restore backup {backup}{of} into deployment {name}, replacing its data", yes)
        change = client.deployments.restore(name, backup, from_deployment=from_deployment)
        finish_change(client, "Restoring", change, wait, timeout, output)


@app.command()
@handle_errors
def delete(
    name: NameArgument,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Delete a deployment: the agent uninstalls it (asks first unless --yes)."""
    confirm(f"delete deployment {name} and uninstall it from its cluster", yes)
    with state().client() as client:
        change = client.deployments.delete(name)
        finish_change(client, "Deleting", change, wait, timeout, output)
