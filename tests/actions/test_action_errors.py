"""An action's error reads the same on its hook step (the agent) and in ``Result.error`` (the harness):
a primitive's ActionError as its message, any other exception with its type first."""

from __future__ import annotations

from typing import Any

import pytest

from styrmin_backend.actions import ActionError, CommandFailed, GlobalContext
from styrmin_backend.agent.prefect._process import _end_message
from styrmin_backend.testing import Context, State
from tests.support.drivers import EXAMPLE_DRIVER


class FakeFailedFlowState:
    """The final state of a flow run whose function raised ``error``, as the agent reads it."""

    type = type("FakeStateType", (), {"value": "FAILED"})()
    name = "Failed"
    message = "Flow run encountered an exception."

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def is_completed(self) -> bool:
        return False

    def is_failed(self) -> bool:
        return True

    def result(self, raise_on_failure: bool) -> Any:
        return self._error


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        pytest.param(KeyError("server"), "KeyError: 'server'", id="bare-key-error"),
        pytest.param(ValueError("boom"), "ValueError: boom", id="own-error"),
        pytest.param(RuntimeError(), "RuntimeError", id="no-message"),
        pytest.param(ActionError("The task failed."), "The task failed.", id="action-error"),
        pytest.param(
            CommandFailed("Job shop-migrate-7f3c failed."), "Job shop-migrate-7f3c failed.", id="command"
        ),
    ],
)
async def test_the_hook_step_and_the_harness_show_an_error_alike(error: Exception, shown: str) -> None:
    async def raising(context: GlobalContext) -> None:
        raise error

    result = await Context(EXAMPLE_DRIVER).arun(raising, State(app_version="1.0.0"))
    step_end = await _end_message(FakeFailedFlowState(error))

    assert (result.error, step_end["error"]) == (shown, shown)
