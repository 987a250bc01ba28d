"""Run as ``python -m styrmin_backend.drivers._action_check DRIVER_DIR OUTPUT LOCATIONS``, never imported.

Takes the action locations as a JSON list, imports each with :func:`check_action`, and
writes ``{location: {"error": str | None, "file_failed": bool}}`` as JSON to OUTPUT. Importing the
driver's code runs it, which is why validation does this in a subprocess of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from styrmin_backend.drivers.loading import ActionLoadError, check_action


def main() -> None:
    sys.dont_write_bytecode = True  # leave no __pycache__ in the driver's folder
    driver_dir, output = Path(sys.argv[1]), Path(sys.argv[2])
    locations: list[str] = json.loads(sys.argv[3])
    results: dict[str, dict[str, object]] = {}
    for location in locations:
        try:
            check_action(driver_dir, location)
            results[location] = {"error": None, "file_failed": False}
        except ActionLoadError as error:
            results[location] = {"error": str(error), "file_failed": error.file_failed}
        except BaseException as error:  # an action's import may raise anything, SystemExit included
            results[location] = {
                "error": f"checking it failed: {type(error).__name__}: {error}",
                "file_failed": True,
            }
    output.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
