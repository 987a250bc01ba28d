"""Keeping each driver's own Python modules apart when one test process loads several drivers.

The agent runs every action in a process of its own, so a driver's ``helpers.py`` never meets another
driver's. A test process is one process: the action file is imported as the agent imports it
(Prefect's ``load_script_as_module``), which puts the driver's folder on ``sys.path`` and leaves the
modules the actions import (``import helpers``) in ``sys.modules`` under their bare names; the next
driver's ``import helpers`` then got the first driver's module.

Each ``Context`` therefore keeps its driver's modules to itself: while it loads or runs an action,
its own modules are in ``sys.modules`` and its folder is first on ``sys.path``; afterwards every
module whose file is in its folder is taken out of ``sys.modules`` again (kept for its next load or
run) and ``sys.path`` is as it was. Swapping the modules in and out, rather than loading them under
a package name of each driver, keeps the action file's code as the agent runs it: its bare
``import helpers`` is unchanged, and so is an import inside an action function, which runs while the
modules are swapped in. A module the test imported itself before is left where it is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


class DriverModules:
    """The modules of one driver folder, in ``sys.modules`` only while :meth:`active`."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder.resolve()
        self._kept: dict[str, ModuleType] = {}

    @contextmanager
    def active(self) -> Iterator[None]:
        """The driver's modules in ``sys.modules`` and its folder first on ``sys.path``, for a load or a run."""
        path_before = list(sys.path)
        names_before = set(sys.modules)
        shadowed = {name: sys.modules[name] for name in self._kept if name in sys.modules}
        sys.modules.update(self._kept)
        sys.path.insert(0, str(self._folder))
        try:
            yield
        finally:
            for name, module in list(sys.modules.items()):
                if (name in self._kept or name not in names_before) and self._owns(module):
                    self._kept[name] = module
                    del sys.modules[name]
            sys.modules.update(shadowed)
            sys.path[:] = path_before

    def _owns(self, module: ModuleType) -> bool:
        file = getattr(module, "__file__", None)
        if not file:
            return False
        try:
            return Path(file).resolve().is_relative_to(self._folder)
        except (OSError, ValueError):
            return False
