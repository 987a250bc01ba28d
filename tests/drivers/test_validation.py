"""Validation reports every problem of a driver at once, each with its file, line, field and a fix."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import pytest

from styrmin_backend.drivers import DriverReport, validate_driver
from styrmin_drivers.validation import validate_driver as validate_without_chart
from tests.drivers.conftest import ACTIONS, EXAMPLE_DRIVER, SPEC, MakeDriver, write_driver

SPEC_WITHOUT_ACTIONS = SPEC.split("  actions:")[0]

# Line numbers matter: the expected messages below name them.
BROKEN_SPEC = """\
apiVersion: styrmin.io/v1
kind: Driver
metadata:
  name: demo
  version: 1.0.0
spec:
  application:
    name: Demo
    defaultVersion: "1.0.0"
  components:
    - name: server
      workload:
        kind: Deployment
        name: "{{ .Release.Name }}-api"
    - name: worker
      workload:
        kind: StatefulSet
        name: "{{ .Release.Name }}-worker"
      container: runner
  actions:
    - name: pre_setup
      hook: setup
      mode: core
      location: "actions.py::pre_setup"
    - name: upgrade
      hook: upgrade
      mode: later
      location: "actions.py::upgrade"
    - name: backup
      hook: nightly
      mode: pre
      location: "actions.py::upgrade"
    - name: upgrade
      hook: upgrade
      mode: post
      location: "actions.py::upgrade"
    - name: missing_file
      hook: upgrade
      mode: post
      location: "missing.py::run"
    - name: missing_function
      hook: upgrade
      mode: post
      location: "actions.py::verify"
    - name: not_a_flow
      hook: upgrade
      mode: post
      location: "actions.py::plain"
    - name: no_context
      hook: backup
      mode: pre
      location: "actions.py::contextless"
    - name: broken_import
      hook: restore
      mode: pre
      location: "broken.py::restore"
    - name: broken_import_again
      hook: restore
      mode: post
      location: "broken.py::other"
"""

BROKEN_ACTIONS = (
    ACTIONS
    + """

def plain(context) -> None:
    pass


@flow
def contextless(target_version: str) -> None:
    pass
"""
)

BROKEN_MODULE = """\
from prefect import flow


@flow
def restore(context:
    pass
"""


@pytest.fixture(scope="module")
def broken_report(tmp_path_factory: pytest.TempPathFactory) -> DriverReport:
    """One driver with one problem of each kind, validated once (the chart's render takes a while)."""
    root = tmp_path_factory.mktemp("broken") / "driver"
    return validate_driver(
        write_driver(root, BROKEN_SPEC, BROKEN_ACTIONS, files={"broken.py": BROKEN_MODULE})
    )


@pytest.fixture(scope="module")
def example_report() -> DriverReport:
    return validate_driver(EXAMPLE_DRIVER)


def _messages(report: DriverReport) -> list[str]:
    return [str(problem) for problem in report.problems]


def test_unknown_mode_names_line_field_and_the_modes(broken_report: DriverReport) -> None:
    assert (
        'driver.styrmin.yml, line 27, spec.actions[1].mode: "later" is not a mode; use pre, core or post.'
        in _messages(broken_report)
    )


def test_unknown_hook_names_line_field_and_the_hooks(broken_report: DriverReport) -> None:
    assert (
        'driver.styrmin.yml, line 30, spec.actions[2].hook: "nightly" is not a hook; '
        "use setup, upgrade, backup or restore." in _messages(broken_report)
    )


def test_duplicate_action_name_points_at_the_second(broken_report: DriverReport) -> None:
    assert (
        'driver.styrmin.yml, line 33, spec.actions[3].name: action name "upgrade" is already used by '
        "spec.actions[1]; give each action its own name." in _messages(broken_report)
    )


def test_core_action_on_setup_says_the_core_is_styrmins_install(broken_report: DriverReport) -> None:
    assert (
        "driver.styrmin.yml, line 23, spec.actions[0].mode: the setup hook has no core action: its core "
        "is Styrmin's own install of the chart; use pre or post." in _messages(broken_report)
    )


def test_location_whose_file_is_missing(broken_report: DriverReport) -> None:
    assert (
        "driver.styrmin.yml, line 40, spec.actions[4].location: missing.py is not in the driver; add it, "
        "or fix the file in missing.py::run." in _messages(broken_report)
    )


def test_location_whose_function_is_missing(broken_report: DriverReport) -> None:
    assert (
        'driver.styrmin.yml, line 44, spec.actions[5].location: actions.py has no function "verify"; '
        "define it there, or fix the function in actions.py::verify." in _messages(broken_report)
    )


def test_function_that_is_not_a_prefect_flow(broken_report: DriverReport) -> None:
    assert (
        "driver.styrmin.yml, line 48, spec.actions[6].location: actions.py::plain (actions.py, line 14) "
        "is not a Prefect flow; decorate it with @flow (from prefect import flow)."
        in _messages(broken_report)
    )


def test_flow_that_does_not_accept_context(broken_report: DriverReport) -> None:
    assert (
        "driver.styrmin.yml, line 52, spec.actions[7].location: actions.py::contextless (actions.py, "
        "line 18) does not accept context; add a parameter `context: GlobalContext`, through which "
        "Styrmin passes the deployment's context." in _messages(broken_report)
    )


def test_file_that_is_not_valid_python_is_reported_once_with_its_line(broken_report: DriverReport) -> None:
    problems = [m for m in _messages(broken_report) if "broken.py" in m]
    assert problems == [
        "driver.styrmin.yml, line 56, spec.actions[8].location: broken.py is not valid Python: "
        "SyntaxError: '(' was never closed (line 5); fix the error."
    ]


def test_component_whose_workload_the_chart_does_not_render(broken_report: DriverReport) -> None:
    assert (
        "driver.styrmin.yml, line 12, spec.components[0].workload: the chart renders no Deployment "
        '"styrmin-check-api" for component server (rendered with release name "styrmin-check"; it renders '
        'Deployment "styrmin-check-server", StatefulSet "styrmin-check-worker"); fix workload.kind and '
        "workload.name, using {{ .Release.Name }} where the chart uses it." in _messages(broken_report)
    )


def test_component_whose_container_the_chart_does_not_render(broken_report: DriverReport) -> None:
    assert (
        "driver.styrmin.yml, line 19, spec.components[1].container: the pod template of component worker "
        'has no container "runner"; its containers are: worker. Fix the container name or the chart.'
        in _messages(broken_report)
    )


def test_every_problem_is_reported_at_once_in_line_order(broken_report: DriverReport) -> None:
    assert not broken_report.valid
    assert len(broken_report.problems) == 11
    lines = [problem.line or 0 for problem in broken_report.problems]
    assert lines == sorted(lines)
    assert broken_report.text().startswith("demo@1.0.0 is not valid: 11 problems.\n")


def test_chart_that_fails_to_render_shows_helms_message(make_driver: MakeDriver) -> None:
    template = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.missing.name }}\n"
    report = validate_driver(make_driver(SPEC_WITHOUT_ACTIONS, actions=None, template=template))

    chart_problems = [p for p in report.problems if p.field == "spec.chart.path"]
    assert len(chart_problems) == 1
    message = str(chart_problems[0])
    assert message.startswith(
        "driver.styrmin.yml, line 6, spec.chart.path: the chart in chart (default) does not render with "
        "its default values: demo/templates/workloads.yaml:4:18"
    )
    assert "nil pointer evaluating interface {}.name" in message
    assert message.endswith("Fix the chart.")


def test_invalid_yaml_names_its_line(make_driver: MakeDriver) -> None:
    spec = SPEC.replace("    name: Demo\n", "    name: [Demo\n")
    report = validate_driver(make_driver(spec, actions=None))

    assert len(report.problems) == 1
    assert str(report.problems[0]).startswith("driver.styrmin.yml, line 9: not valid YAML: ")


def test_unknown_field_is_named_with_the_fields_allowed_there(make_driver: MakeDriver) -> None:
    spec = SPEC_WITHOUT_ACTIONS.replace(
        "      container: server\n", "      container: server\n      replicas: 3\n"
    )
    report = validate_driver(make_driver(spec, actions=None))

    assert _messages(report) == [
        "driver.styrmin.yml, line 16, spec.components[0].replicas: unknown field; remove it or fix its "
        "spelling (fields here: name, workload, container)."
    ]


def test_missing_required_field_says_what_to_add(make_driver: MakeDriver) -> None:
    spec = SPEC_WITHOUT_ACTIONS.replace('    defaultVersion: "1.0.0"\n', "")
    report = validate_driver(make_driver(spec, actions=None))

    assert _messages(report) == [
        "driver.styrmin.yml, line 7, spec.application.defaultVersion: required field is missing; add it "
        "(the application version a new deployment gets when its request names none)."
    ]


def test_seed_example_with_a_spec_around_it_is_valid(make_driver: MakeDriver) -> None:
    report = validate_driver(make_driver(SPEC))

    assert report.valid, report.text()
    assert [(a.name, a.hook.value, a.mode.value) for a in report.actions] == [
        ("pre_setup", "setup", "pre"),
        ("upgrade", "upgrade", "core"),
    ]
    assert report.text().startswith("demo@1.0.0 is valid.\nComponents (2):\n  server: Deployment")


def test_validation_never_runs_the_drivers_code(make_driver: MakeDriver, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run_at_import = f"open({str(marker)!r}, 'w').write('driver code ran')\n"
    actions = run_at_import + ACTIONS + "\n\ndef plain(context):\n    pass\n"
    spec = SPEC + '    - {name: plain, hook: backup, mode: pre, location: "actions.py::plain"}\n'
    root = make_driver(spec, actions=actions, files={"helpers.py": run_at_import})
    modules_before = set(sys.modules)

    report = validate_driver(root)

    assert not marker.exists()
    assert _messages(report) == [
        "driver.styrmin.yml, line 30, spec.actions[2].location: actions.py::plain (actions.py, line 15) "
        "is not a Prefect flow; decorate it with @flow (from prefect import flow)."
    ]
    assert not {name for name in set(sys.modules) - modules_before if "actions" in name}


@pytest.mark.parametrize(
    "decorated",
    [
        "from prefect import flow\n\n@flow\ndef run(context): ...\n",
        "from prefect import flow\n\n@flow(name='x', log_prints=True)\nasync def run(context): ...\n",
        "import prefect\n\n@prefect.flow\nasync def run(*, context): ...\n",
        "import prefect as p\n\n@p.flow()\ndef run(**kwargs): ...\n",
        "from prefect import flow as action\n\n@action\ndef run(context, target_version): ...\n",
    ],
)
def test_every_way_of_writing_a_flow_is_recognised(make_driver: MakeDriver, decorated: str) -> None:
    spec = (
        SPEC_WITHOUT_ACTIONS
        + '  actions:\n    - {name: run, hook: backup, mode: pre, location: "a.py::run"}\n'
    )
    report = validate_driver(make_driver(spec, actions=None, files={"a.py": decorated}))
    assert report.valid, report.text()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def run(context): ...\n", "a.py::run (a.py, line 1) is not a Prefect flow"),
        ("from prefect import task\n\n@task\ndef run(context): ...\n", "a.py::run (a.py, line 3) is not"),
        ("from prefect import flow\n\n@flow\ndef run(): ...\n", "does not accept context"),
        (
            "from prefect import flow\n\n@flow\ndef run(context, *, force, dry_run): ...\n",
            "a.py::run (a.py, line 4) requires the parameters force, dry_run, which Styrmin never passes",
        ),
        ("from other import run\n", '"run" is not defined by a def statement in a.py'),
        ("x = 1\n", 'a.py has no function "run"'),
        ("\x00", "a.py is not valid Python"),
    ],
)
def test_actions_that_are_not_flows_are_named_with_their_line(
    make_driver: MakeDriver, source: str, message: str
) -> None:
    spec = (
        SPEC_WITHOUT_ACTIONS
        + '  actions:\n    - {name: run, hook: backup, mode: pre, location: "a.py::run"}\n'
    )
    report = validate_driver(make_driver(spec, actions=None, files={"a.py": source}))
    assert len(report.problems) == 1
    assert message in str(report.problems[0])


def test_a_required_parameter_styrmin_never_passes_is_named_with_its_line(make_driver: MakeDriver) -> None:
    spec = (
        SPEC_WITHOUT_ACTIONS
        + '  actions:\n    - {name: run, hook: backup, mode: pre, location: "a.py::run"}\n'
    )
    source = (
        "from prefect import flow\n\n@flow\ndef run(context, target_version,\n        dry_run: bool): ...\n"
    )

    report = validate_driver(make_driver(spec, actions=None, files={"a.py": source}))

    assert [str(problem).split(": ", 1)[1] for problem in report.problems] == [
        "a.py::run (a.py, line 5) requires the parameter dry_run, which Styrmin never passes: an action "
        "receives only context and target_version (each when it declares it). Give dry_run a default "
        "value, or remove it."
    ]


@pytest.mark.parametrize(
    "signature",
    [
        "context",
        "context, target_version",
        "target_version, context",
        "context, dry_run: bool = False, *, force=None",
        "context, *args, **kwargs",
        "**parameters",
    ],
)
def test_parameters_with_defaults_or_that_styrmin_passes_are_valid(
    make_driver: MakeDriver, signature: str
) -> None:
    spec = (
        SPEC_WITHOUT_ACTIONS
        + '  actions:\n    - {name: run, hook: backup, mode: pre, location: "a.py::run"}\n'
    )
    source = f"from prefect import flow\n\n@flow\nasync def run({signature}): ...\n"

    report = validate_driver(make_driver(spec, actions=None, files={"a.py": source}))

    assert report.valid, report.text()


def test_a_missing_chart_folder_is_reported_offline_naming_its_path(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC.replace("spec:\n", "spec:\n  chart: {path: charts/mine}\n", 1))

    report = validate_without_chart(root)

    assert [str(p).split(": ", 1)[1] for p in report.problems] == [
        "charts/mine/ is not a folder of the driver; put the Helm chart there, or fix spec.chart.path."
    ]


def test_a_chart_folder_without_chart_yaml_is_reported_once_without_helm(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC.replace("spec:\n", "spec:\n  chart: {path: charts/mine}\n", 1))
    (root / "charts" / "mine").mkdir(parents=True)

    offline, remote = validate_without_chart(root), validate_driver(root)

    expected = (
        "charts/mine/Chart.yaml is missing: there is no Helm chart in charts/mine/; add the chart's "
        "Chart.yaml, or fix spec.chart.path."
    )
    assert [str(p).split(": ", 1)[1] for p in offline.problems] == [expected]
    assert [str(p).split(": ", 1)[1] for p in remote.problems] == [expected]


def test_validation_leaves_no_bytecode_in_the_driver(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC)
    validate_driver(root)
    assert not list(root.rglob("__pycache__"))


def test_archive_is_validated_like_its_folder(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC.replace("mode: pre", "mode: later"), actions=None)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(root, arcname="demo")

    from_archive = validate_driver(buffer.getvalue())

    assert _messages(from_archive) == _messages(validate_driver(root))
    assert 'spec.actions[0].mode: "later" is not a mode; use pre, core or post.' in _messages(from_archive)[0]


def test_a_driver_without_actions_validates_with_its_chart_rendered(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC_WITHOUT_ACTIONS, actions=None)

    report = validate_driver(root)

    assert report.valid, report.text()


def test_example_driver_is_valid(example_report: DriverReport) -> None:
    assert example_report.valid, example_report.text()
    assert [c.name for c in example_report.components] == ["server", "task-worker"]
