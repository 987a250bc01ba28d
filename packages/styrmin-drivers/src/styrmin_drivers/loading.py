"""Where an action ``FILE.py::FUNCTION`` of an extracted driver is, checked without importing it.

Importing a driver's code runs it, so only the agent does, in the process that runs the action
(``styrmin_backend.drivers.loading``). Validation reads the file instead (``_action_check.py``).
"""

from __future__ import annotations

from pathlib import Path

from styrmin_drivers.spec import Action, parse_location


class ActionLoadError(Exception):
    """An action cannot be loaded; the message says why and what to do.

    ``file_failed`` is true when the action's whole file is at fault (missing, or fails to import),
    which every other action of that file shares.
    """

    def __init__(self, message: str, *, file_failed: bool = False) -> None:
        super().__init__(message)
        self.file_failed = file_failed


def action_file(driver_dir: Path, location: str | Action) -> Path:
    """The Python file of the action at ``location``, checked to be inside the driver, without importing it.

    Raises:
        ActionLoadError: if the location is malformed, leaves the driver, or its file is missing.
    """
    file, _ = split_location(location)
    root = driver_dir.resolve()
    path = (root / file).resolve()
    if not path.is_relative_to(root):
        raise ActionLoadError(
            f"{file} is outside the driver's folder; locations are relative to it.", file_failed=True
        )
    if not path.is_file():
        raise ActionLoadError(
            f"{file} is not in the driver; add it, or fix the file in {location_text(location)}.",
            file_failed=True,
        )
    return path


def split_location(location: str | Action) -> tuple[str, str]:
    """The file and the function of ``location``; raises ActionLoadError when it is malformed."""
    if isinstance(location, Action):
        return location.file, location.function
    try:
        return parse_location(location)
    except ValueError as error:
        raise ActionLoadError(str(error)) from None


def location_text(location: str | Action) -> str:
    return location.location if isinstance(location, Action) else location
