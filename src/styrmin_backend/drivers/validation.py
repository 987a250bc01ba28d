"""Validating a driver: every problem at once, each with its file, line and field, and what to do.

Checks the spec's shape and rules, renders the chart with Helm to find each component's workload and
container, and reads each action's file without running it (``_action_check.py``) to check that the
function is a Prefect flow that accepts ``context``. Nothing here imports or runs a driver's code.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from styrmin_backend.drivers._action_check import check_action_source
from styrmin_backend.drivers.loading import ActionLoadError
from styrmin_backend.drivers.package import (
    DriverPackage,
    read_driver_archive_files,
    read_driver_folder_files,
    write_driver_files,
)
from styrmin_backend.drivers.parsing import ParsedSpec, parse_driver_spec
from styrmin_backend.drivers.render import RenderError, render_chart_folder
from styrmin_backend.drivers.report import (
    ActionSummary,
    ComponentSummary,
    DriverError,
    DriverProblem,
    DriverReport,
)
from styrmin_backend.drivers.spec import DEFAULT_CHART_PATH, SPEC_FILE_NAME
from styrmin_backend.drivers.workloads import ComponentNotRendered, component_container, find_workload

VALIDATION_RELEASE_NAME = "styrmin-check"
"""The release name the chart is rendered with during validation (workload names must follow it)."""

VALIDATION_NAMESPACE = "default"


def validate_driver(source: Path | bytes | DriverPackage) -> DriverReport:
    """Validate a driver folder, a ``.tar.gz`` (path or bytes) or a read package; never raises for
    a driver's own problems: they are in :attr:`DriverReport.problems`, all of them.
    """
    if isinstance(source, Path) and source.is_dir():
        try:
            read_driver_folder_files(source)  # refuses symlinks and oversize folders, as a push would
        except DriverError as error:
            return DriverReport(problems=error.problems)
        return _validate_folder(source)
    if isinstance(source, DriverPackage):
        with tempfile.TemporaryDirectory(prefix="styrmin-driver-") as scratch:
            return _validate_folder(source.extract_to(Path(scratch)))
    try:
        if isinstance(source, Path):
            if not source.is_file():
                return DriverReport(
                    problems=[
                        DriverProblem(
                            file=str(source),
                            message="no such folder or file; give a driver folder or a .tar.gz.",
                        )
                    ]
                )
            source = source.read_bytes()
        files = read_driver_archive_files(source)
    except DriverError as error:
        return DriverReport(problems=error.problems)
    with tempfile.TemporaryDirectory(prefix="styrmin-driver-") as scratch:
        return _validate_folder(write_driver_files(files, Path(scratch)))


def _validate_folder(folder: Path) -> DriverReport:
    spec_path = folder / SPEC_FILE_NAME
    if not spec_path.is_file():
        return DriverReport(
            problems=[
                DriverProblem(
                    file=SPEC_FILE_NAME,
                    message="missing at the driver's root; add it there (see docs/drivers.md).",
                )
            ]
        )
    try:
        text = spec_path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return DriverReport(
            problems=[DriverProblem(file=SPEC_FILE_NAME, message="not UTF-8 text; save it as UTF-8.")]
        )
    parsed = parse_driver_spec(text)

    problems = list(parsed.problems) + _action_problems(folder, parsed) + _chart_problems(folder, parsed)
    problems.sort(key=lambda p: (p.file != SPEC_FILE_NAME, p.line or 0))
    return _report(parsed, problems)


def _chart_problems(folder: Path, parsed: ParsedSpec) -> list[DriverProblem]:
    if parsed.chart is None or parsed.application is None:
        return []  # the spec's own problems say why
    chart_loc: tuple[str | int, ...] = ("spec", "chart", "path")
    try:
        manifests = render_chart_folder(
            folder / parsed.chart.path,
            VALIDATION_RELEASE_NAME,
            VALIDATION_NAMESPACE,
            parsed.application.default_version,
            {},
        )
    except RenderError as error:
        where = (
            parsed.chart.path
            if parsed.chart.path != DEFAULT_CHART_PATH
            else f"{DEFAULT_CHART_PATH} (default)"
        )
        return [
            parsed.problem(
                chart_loc,
                f"the chart in {where} does not render with its default values: {error}. Fix the chart.",
            )
        ]
    problems = []
    for index, component in parsed.components:
        workload = find_workload(manifests, component, VALIDATION_RELEASE_NAME)
        if workload is None:
            name = component.workload.resolved_name(VALIDATION_RELEASE_NAME)
            rendered = (
                ", ".join(
                    f'{m["kind"]} "{(m.get("metadata") or {}).get("name")}"'
                    for m in manifests
                    if m.get("kind") in ("Deployment", "StatefulSet")
                )
                or "no Deployment or StatefulSet"
            )
            problems.append(
                parsed.problem(
                    ("spec", "components", index, "workload"),
                    f'the chart renders no {component.workload.kind} "{name}" for component {component.name} '
                    f'(rendered with release name "{VALIDATION_RELEASE_NAME}"; it renders {rendered}); '
                    "fix workload.kind and workload.name, using {{ .Release.Name }} where the chart uses it.",
                )
            )
            continue
        try:
            component_container(workload.get("spec", {}).get("template", {}), component)
        except ComponentNotRendered as error:
            problems.append(
                parsed.problem(
                    ("spec", "components", index, "container" if component.container else "workload"),
                    f"{error} Fix the container name or the chart.",
                )
            )
    return problems


def _action_problems(folder: Path, parsed: ParsedSpec) -> list[DriverProblem]:
    problems = []
    failed_files: set[str] = set()
    for index, action in parsed.actions:
        if action.file in failed_files:
            continue  # one problem per missing or broken file, at its first action
        try:
            check_action_source(folder, action)
        except ActionLoadError as error:
            if error.file_failed:
                failed_files.add(action.file)
            problems.append(parsed.problem(("spec", "actions", index, "location"), str(error)))
    return problems


def _report(parsed: ParsedSpec, problems: list[DriverProblem]) -> DriverReport:
    spec = parsed.spec
    data = parsed.source.data if parsed.source and isinstance(parsed.source.data, dict) else {}
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    return DriverReport(
        name=spec.metadata.name if spec else _text_or_none(metadata.get("name")),
        version=spec.metadata.version if spec else _text_or_none(metadata.get("version")),
        components=[ComponentSummary.of(c) for _, c in parsed.components],
        actions=[ActionSummary.of(a) for _, a in parsed.actions],
        problems=problems,
    )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
