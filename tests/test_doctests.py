"""The examples in docstrings run: every module of src/ and packages/*/src/ with a ``>>>`` example, as doctests."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "src", *sorted((ROOT / "packages").glob("*/src"))]


def _modules_with_examples() -> list[str]:
    modules = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            if ">>>" not in path.read_text(encoding="utf-8"):
                continue
            parts = path.relative_to(source).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


MODULES = _modules_with_examples()


def test_the_modules_with_examples_are_found() -> None:
    assert "styrmin_backend.actions._tail" in MODULES and "styrmin_backend.testing._context" in MODULES
    assert "styrmin_drivers.hooks" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Examples use paths relative to the repository's root (examples/drivers/shop).
    monkeypatch.chdir(ROOT)
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, (
        f"{results.failed} docstring example(s) of {name} failed; see the output above"
    )
