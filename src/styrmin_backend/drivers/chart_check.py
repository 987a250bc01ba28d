"""The chart half of validating a driver: render it with Helm, find each component's workload.

The driver library (``styrmin_drivers.validation``) checks everything else without Helm; the
server's :func:`validate_driver` passes :func:`chart_problems` to it, so a push checks both.
"""

from __future__ import annotations

from pathlib import Path

from styrmin_backend.drivers.render import RenderError, render_chart_folder
from styrmin_backend.drivers.workloads import ComponentNotRendered, component_container, find_workload
from styrmin_drivers.package import DriverPackage
from styrmin_drivers.parsing import ParsedSpec
from styrmin_drivers.report import DriverProblem, DriverReport
from styrmin_drivers.spec import DEFAULT_CHART_PATH
from styrmin_drivers.validation import validate_driver as validate_without_chart

VALIDATION_RELEASE_NAME = "styrmin-check"
"""The release name the chart is rendered with during validation (workload names must follow it)."""

VALIDATION_NAMESPACE = "default"


def validate_driver(source: Path | bytes | DriverPackage) -> DriverReport:
    """Validate a driver folder, a ``.tar.gz`` (path or bytes) or a read package, its chart rendered;
    never raises for a driver's own problems: they are in :attr:`DriverReport.problems`, all of them.
    """
    return validate_without_chart(source, chart_check=chart_problems)


def chart_problems(folder: Path, parsed: ParsedSpec) -> list[DriverProblem]:
    """The problems of rendering the chart with its default values: each component's workload and
    container must be in what it renders."""
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
                f"the chart in {where} does not render with its default values: {str(error).rstrip('.')}. "
                "Fix the chart.",
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
