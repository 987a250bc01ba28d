"""Loading an action ``FILE.py::FUNCTION`` of an extracted driver as a Prefect flow.

Only the agent calls :func:`load_action_flow`, in the process that runs the action: importing a
driver's code runs it. The server checks actions without running them (``styrmin_drivers``).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from styrmin_drivers.loading import ActionLoadError, action_file, location_text, split_location
from styrmin_drivers.spec import Action

__all__ = ["ActionLoadError", "action_file", "load_action_flow", "split_location"]


def load_action_flow(driver_dir: Path, location: str | Action) -> Any:
    """The Prefect flow at ``location`` (``FILE.py::FUNCTION``) of the driver in ``driver_dir``.

    The file is imported the way Prefect imports flow entrypoints, with the driver's folder first on
    ``sys.path`` so that the action's own modules import.

    Returns:
        The ``prefect.Flow`` object.

    Raises:
        ActionLoadError: if the location is malformed or leaves the driver, the file is missing or
            fails to import, the function is missing, or it is not a Prefect flow.
    """
    from prefect import Flow

    function = _load_function(driver_dir, location)
    if not isinstance(function, Flow):
        raise ActionLoadError(
            f"{location_text(location)}{_where(function)} is not a Prefect flow; decorate it with @flow "
            "(from prefect import flow)."
        )
    return function


def _load_function(driver_dir: Path, location: str | Action) -> Any:
    from prefect.exceptions import ScriptError
    from prefect.utilities.importtools import load_script_as_module

    path = action_file(driver_dir, location)
    file, name = split_location(location)
    try:
        module = load_script_as_module(str(path))
    except ScriptError as error:
        cause = error.user_exc
        raise ActionLoadError(
            f"{file} fails to import: {type(cause).__name__}: {_message(cause)}{_line_of(cause, path)}; "
            "fix the error, and make sure every module it imports is installed where Styrmin runs.",
            file_failed=True,
        ) from None
    if not hasattr(module, name):
        raise ActionLoadError(
            f'{file} has no function "{name}"; define it there, or fix the function in {location_text(location)}.'
        )
    return getattr(module, name)


def _where(function: Any) -> str:
    target = getattr(function, "fn", function)
    try:
        file = Path(inspect.getsourcefile(target) or "").name
        line = inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        return ""
    return f" ({file}, line {line})"


def _message(error: BaseException) -> str:
    """The error's message without the file and line a SyntaxError adds to it (``_line_of`` gives the line)."""
    if isinstance(error, SyntaxError) and error.msg:
        return error.msg
    return str(error)


def _line_of(error: BaseException, path: Path) -> str:
    if isinstance(error, SyntaxError) and error.lineno:
        return f" (line {error.lineno})"
    traceback = error.__traceback__
    line = None
    while traceback is not None:
        if Path(traceback.tb_frame.f_code.co_filename).resolve() == path:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return f" (line {line})" if line else ""
