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
import sysconfig
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
        # Modules of another folder under the names of this driver's own files (a helpers.py another
        # test or driver left in sys.modules) would answer this driver's bare imports: out of the way.
        # Only modules of no installed code (another driver's, a test's): never the standard
        # library's or an installed package's, whatever a driver names its files.
        own = self._top_level_names()
        roots = _installed_code()
        shadowed = {
            name: module
            for name, module in sys.modules.items()
            if (name in self._kept or (name.partition(".")[0] in own and _off_path(module, roots)))
            and not self._owns(module)
        }
        for name in shadowed:
            del sys.modules[name]
        names_before = set(sys.modules)
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

    def _top_level_names(self) -> set[str]:
        """The names this driver's folder gives modules: its ``.py`` files and its packages."""
        try:
            entries = list(self._folder.iterdir())
        except OSError:
            return set()
        return {
            entry.stem if entry.suffix == ".py" else entry.name
            for entry in entries
            if entry.suffix == ".py" or (entry.is_dir() and (entry / "__init__.py").is_file())
        }

    def _owns(self, module: ModuleType) -> bool:
        file = getattr(module, "__file__", None)
        if not file:
            return False
        try:
            return Path(file).resolve().is_relative_to(self._folder)
        except (OSError, ValueError):
            return False


def _installed_code() -> list[Path]:
    """The folders of the standard library and of installed packages."""
    paths = sysconfig.get_paths()
    return [
        Path(paths[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths
    ]


def _off_path(module: ModuleType, roots: list[Path]) -> bool:
    """Whether ``module`` was loaded from a file under none of ``roots`` (installed code)."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    try:
        path = Path(file).resolve()
    except (OSError, ValueError):
        return False
    return not any(path.is_relative_to(root) for root in roots)
