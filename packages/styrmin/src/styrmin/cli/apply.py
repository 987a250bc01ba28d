"""``styrminctl apply -f deployment.yaml``: make a deployment what a file says.

The file (YAML or JSON) names the deployment and says what it should be::

    name: shop                 # required
    driver: shop               # required
    driver_version: 1.0.0      # required
    app_version: 2.0.0         # default: the driver's on create, the current one otherwise
    namespace: shop            # on create; default: the name. A deployment keeps its namespace.
    cluster: local             # on create; default: the server's. A deployment keeps its cluster.
    configuration:             # the whole configuration; "<secret: set>" keeps a stored secret
      values: {}
      images: {}
      env: {}
    stopped_components: []     # absent: as they are

What ``styrminctl deployments get NAME -o yaml`` prints is such a file: the fields only the server
sets (status, revision, times, what the cluster runs) are ignored.

Exit codes: 0 created, changed or unchanged (with --wait: its task succeeded); 1 the server refused
the change or its task failed; 2 the file is not valid, or the server could not be reached.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from styrmin.cli._common import (
    EXIT_FAILED,
    OutputOption,
    UsageProblem,
    WaitOption,
    WaitTimeoutOption,
    handle_errors,
    state,
)
from styrmin.cli.output import OutputFormat, emit, is_machine, make_console
from styrmin.cli.preview import DryRunOption, show_preview
from styrmin.cli.progress import follow_changes

FILE_FIELDS = ("name", "driver", "driver_version", "app_version", "namespace", "cluster", "configuration")
"""The fields of an apply file, besides ``stopped_components``."""
SERVER_FIELDS = frozenset(
    {
        "id",
        "running_app_version",
        "running_driver_version",
        "components_status",
        "components_status_at",
        "status",
        "status_reason",
        "status_task_id",
        "revision",
        "created_at",
        "updated_at",
    }
)
"""Fields of `deployments get -o yaml` that only the server sets: an apply file may hold them, ignored."""
_REQUIRED = ("name", "driver", "driver_version")
_CONFIGURATION_KEYS = frozenset({"values", "images", "env"})


class FileProblem(UsageProblem):
    """An apply file that is not valid; the message names the file, line and field."""


def _lines_of(text: str, is_json: bool) -> dict[str, int]:
    """The line (from 1) of each top-level and configuration key of a YAML file."""
    if is_json:
        return {}
    import yaml

    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            lines[str(key.value)] = key.start_mark.line + 1
            if isinstance(value, yaml.MappingNode):
                for inner, _ in value.value:
                    lines[f"{key.value}.{inner.value}"] = inner.start_mark.line + 1
    return lines


STDIN = Path("-")
"""``-f -``: the file comes on standard input, as ``kubectl get -o yaml | kubectl apply -f -`` reads it."""


def read_apply_file(file: Path) -> dict[str, Any]:
    """The apply file at ``file`` (standard input for ``-``), checked; raises FileProblem naming the
    line and field at fault."""
    import yaml

    path = "standard input" if file == STDIN else str(file)
    try:
        text = sys.stdin.read() if file == STDIN else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise FileProblem(f"Cannot read {path}: {getattr(error, 'strerror', None) or error}.") from None
    is_json = file.suffix == ".json"  # YAML reads JSON too: standard input is read as YAML
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise FileProblem(f"{path}, line {error.lineno}: not valid JSON: {error.msg}.") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        reason = getattr(error, "problem", None) or str(error)
        raise FileProblem(f"{path}{where}: not valid YAML: {reason}.") from None
    lines = _lines_of(text, is_json)

    def problem(field: str, message: str) -> FileProblem:
        line = lines.get(field) or lines.get(field.split(".", 1)[0])
        where = f", line {line}" if line else ""
        return FileProblem(f"{path}{where}, {field}: {message}")

    if not isinstance(data, dict):
        raise FileProblem(
            f"{path}: an apply file is a mapping with name, driver and driver_version at least."
        )
    unknown = sorted(str(key) for key in data if key not in FILE_FIELDS and key != "stopped_components")
    unknown = [key for key in unknown if key not in SERVER_FIELDS]
    if unknown:
        raise problem(
            unknown[0],
            f"not a field of an apply file; its fields are {', '.join(FILE_FIELDS)} and stopped_components.",
        )
    for field in _REQUIRED:
        if data.get(field) in (None, ""):
            raise FileProblem(f"{path}, {field}: missing; an apply file names {', '.join(_REQUIRED)}.")
    for field in ("name", "driver", "driver_version", "app_version", "namespace", "cluster"):
        value = data.get(field)
        if value is not None and not isinstance(value, str | int | float):
            raise problem(field, f"must be text, not {type(value).__name__}.")
    configuration = data.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise problem("configuration", "must be a mapping with values, images and env.")
    for key in configuration:
        if key not in _CONFIGURATION_KEYS:
            raise problem(f"configuration.{key}", "not a part of a configuration; use values, images or env.")
    for key in _CONFIGURATION_KEYS:
        if configuration.get(key) is not None and not isinstance(configuration[key], dict):
            raise problem(f"configuration.{key}", "must be a mapping.")
    stopped = data.get("stopped_components")
    if stopped is not None and (
        not isinstance(stopped, list) or not all(isinstance(c, str) and c for c in stopped)
    ):
        raise problem("stopped_components", "must be a list of component names.")
    shown = {field: data.get(field) for field in FILE_FIELDS}
    for field in ("name", "driver", "driver_version", "app_version", "namespace", "cluster"):
        if shown[field] is not None:
            shown[field] = str(shown[field])
    shown["configuration"] = {key: configuration.get(key) or {} for key in sorted(_CONFIGURATION_KEYS)}
    shown["stopped_components"] = stopped
    return shown


def apply(
    file: Annotated[
        Path,
        typer.Option(
            "--file",
            "-f",
            help="The deployment file (YAML or JSON), or - for standard input; see docs/cli.md#apply.",
        ),
    ],
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = None,
    output: OutputOption = OutputFormat.TEXT,
    dry_run: DryRunOption = False,
) -> None:
    """Make a deployment what a file says: create it, request the one change that gets it there, or
    print "unchanged". Exit 0 on success, 1 when refused or its task failed, 2 for a bad file."""
    desired = read_apply_file(file)
    name = desired.pop("name")
    with state().client() as client:
        if dry_run:
            show_preview(client, name, "apply", output, **desired)
            return
        applied = client.deployments.apply(name, **desired)
        if not applied.changes and not is_machine(output):
            make_console().print(f'Deployment "{name}" unchanged.', soft_wrap=True)
        verb = "Creating" if applied.outcome == "created" else "Changing"
        changes, failed = follow_changes(client, verb, applied.changes, wait, timeout, output)
    if is_machine(output):
        emit({"outcome": applied.outcome, "changes": changes}, output)
    if failed:
        raise typer.Exit(EXIT_FAILED)


apply_command = handle_errors(apply)
"""``apply`` with styrminctl's error handling and exit codes."""
