"""Validating a driver: every problem at once, each with its file, line and field, and what to do.

Checks the spec's shape and rules and reads each action's file without running it
(``_action_check.py``) to check that the function is a Prefect flow that accepts ``context``. Nothing
here imports or runs a driver's code. Rendering the chart needs Helm, which this library leaves out:
the server passes its chart check (``styrmin_backend.drivers.chart_check``) as ``chart_check``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from styrmin_drivers._action_check import check_action_source
from styrmin_drivers.loading import ActionLoadError
from styrmin_drivers.package import (
    DriverPackage,
    read_driver_archive_files,
    read_driver_folder_files,
    write_driver_files,
)
from styrmin_drivers.parsing import ParsedSpec, parse_driver_spec
from styrmin_drivers.report import (
    ActionSummary,
    ComponentSummary,
    DriverError,
    DriverProblem,
    DriverReport,
)
from styrmin_drivers.spec import SPEC_FILE_NAME

ChartCheck = Callable[[Path, ParsedSpec], list[DriverProblem]]
"""Renders the chart of the driver extracted in a folder and returns its problems (the server's)."""


def validate_driver(
    source: Path | bytes | DriverPackage, *, chart_check: ChartCheck | None = None
) -> DriverReport:
    """Validate a driver folder, a ``.tar.gz`` (path or bytes) or a read package; never raises for
    a driver's own problems: they are in :attr:`DriverReport.problems`, all of them.

    Without ``chart_check`` the chart is not rendered, so its workloads are not checked.
    """
    if isinstance(source, Path) and source.is_dir():
        try:
            read_driver_folder_files(source)  # refuses symlinks and oversize folders, as a push would
        except DriverError as error:
            return DriverReport(problems=error.problems)
        return _validate_folder(source, chart_check)
    if isinstance(source, DriverPackage):
        with tempfile.TemporaryDirectory(prefix="styrmin-driver-") as scratch:
            return _validate_folder(source.extract_to(Path(scratch)), chart_check)
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
        return _validate_folder(write_driver_files(files, Path(scratch)), chart_check)


def _validate_folder(folder: Path, chart_check: ChartCheck | None) -> DriverReport:
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

    chart = _chart_folder_problems(folder, parsed)
    problems = list(parsed.problems) + chart + _action_problems(folder, parsed)
    if chart_check is not None and not chart:
        problems += chart_check(folder, parsed)
    problems.sort(key=lambda p: (p.file != SPEC_FILE_NAME, p.line or 0))
    return _report(parsed, problems)


def _chart_folder_problems(folder: Path, parsed: ParsedSpec) -> list[DriverProblem]:
    """A chart folder that is missing, or has no Chart.yaml: found without Helm, offline too."""
    if parsed.chart is None:
        return []  # the spec's own problems say why
    path = parsed.chart.path.rstrip("/")
    chart_dir = folder / path
    if not chart_dir.is_dir():
        message = f"{path}/ is not a folder of the driver; put the Helm chart there, or fix spec.chart.path."
    elif not (chart_dir / "Chart.yaml").is_file():
        message = (
            f"{path}/Chart.yaml is missing: there is no Helm chart in {path}/; add the chart's "
            "Chart.yaml, or fix spec.chart.path."
        )
    else:
        return []
    return [parsed.problem(("spec", "chart", "path"), message)]


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
