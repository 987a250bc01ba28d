"""Loading an action FILE.py::FUNCTION of an extracted driver as a Prefect flow, for the agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import Flow

from styrmin_backend.drivers import ActionLoadError, load_action_flow, load_driver_spec
from tests.drivers.conftest import ACTIONS, SPEC, MakeDriver


def test_action_loads_as_a_prefect_flow(make_driver: MakeDriver) -> None:
    root = make_driver(
        SPEC, files={"helpers.py": "GREETING = 'hi'\n"}, actions="from helpers import GREETING\n" + ACTIONS
    )
    spec = load_driver_spec(SPEC)

    flow = load_action_flow(root, spec.spec.actions[1])

    assert isinstance(flow, Flow)
    assert flow.fn.__name__ == "upgrade"
    assert isinstance(load_action_flow(root, "actions.py::pre_setup"), Flow)


def test_actions_of_two_drivers_with_the_same_file_name_stay_apart(make_driver: MakeDriver) -> None:
    first = make_driver(SPEC, actions=ACTIONS.replace("pass", "return 'first'", 1))
    second = make_driver(SPEC, actions=ACTIONS.replace("pass", "return 'second'", 1))

    one, two = (
        load_action_flow(first, "actions.py::pre_setup"),
        load_action_flow(second, "actions.py::pre_setup"),
    )

    assert one.fn.__code__.co_filename != two.fn.__code__.co_filename


@pytest.mark.parametrize(
    ("actions", "location", "message"),
    [
        (
            ACTIONS,
            "missing.py::run",
            "missing.py is not in the driver; add it, or fix the file in missing.py::run.",
        ),
        (ACTIONS, "actions.py::verify", 'actions.py has no function "verify"; define it there'),
        (
            ACTIONS + "\ndef plain(context):\n    pass\n",
            "actions.py::plain",
            "actions.py::plain (actions.py, line 13) is not a Prefect flow; decorate it with @flow",
        ),
        (
            "raise RuntimeError('no database')\n",
            "actions.py::upgrade",
            "actions.py fails to import: RuntimeError: no database (line 1)",
        ),
        (
            "\n\ndef broken(:\n",
            "actions.py::upgrade",
            "actions.py fails to import: SyntaxError: invalid syntax (line 3); fix the error",
        ),
        (ACTIONS, "../outside.py::run", "../outside.py is outside the driver's folder"),
        (
            ACTIONS,
            "actions.py:upgrade",
            '"actions.py:upgrade" is not an action location; write FILE.py::FUNCTION.',
        ),
    ],
)
def test_load_errors_say_what_to_do(
    make_driver: MakeDriver, actions: str, location: str, message: str
) -> None:
    root = make_driver(SPEC, actions=actions)
    with pytest.raises(ActionLoadError) as raised:
        load_action_flow(root, location)
    assert message in str(raised.value)


def test_missing_driver_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ActionLoadError, match=r"actions.py is not in the driver"):
        load_action_flow(tmp_path / "nowhere", "actions.py::upgrade")
