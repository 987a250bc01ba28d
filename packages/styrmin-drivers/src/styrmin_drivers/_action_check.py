"""Checking an action ``FILE.py::FUNCTION`` by reading its source, never by running it.

The server validates drivers that anyone signed in may upload, so it must not import them: importing
a module runs its code with the server's rights. The file is parsed with :mod:`ast` instead, and the
function is looked up among the file's top-level definitions: it must be decorated as a Prefect
flow (``@flow``, ``@flow(...)``, ``@prefect.flow``, or an alias of them), accept ``context``, and need
no parameter the agent does not pass (it passes only :data:`ACTION_PARAMETERS`, each when declared).
What only running the code can show (a module that is not installed, an error at import time) shows
when the action runs in the agent, and offline with ``styrmin_backend.testing``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from styrmin_drivers.loading import ActionLoadError, action_file, split_location
from styrmin_drivers.spec import Action

_PREFECT_FLOW = "prefect.flow"

ACTION_PARAMETERS = ("context", "target_version")
"""The parameters the agent passes an action, by name, each only when the function declares it."""


def check_action_source(driver_dir: Path, location: str | Action) -> None:
    """Check, without running it, that ``location`` names a Prefect flow that accepts ``context``.

    Raises:
        ActionLoadError: saying what is wrong, where (file and line) and what to do;
            ``file_failed`` when the whole file is at fault (missing, not UTF-8, not valid Python).
    """
    path = action_file(driver_dir, location)
    file, name = split_location(location)
    text = _location_text(location)
    tree = _parse(path, file)
    definition = _top_level_definition(tree, name)
    if definition is None:
        raise ActionLoadError(
            f'{file} has no function "{name}"; define it there, or fix the function in {text}.'
        )
    if not isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef):
        raise ActionLoadError(
            f'{file}, line {definition.lineno}: "{name}" is not defined by a def statement in {file}; '
            f"define the action's function there with @flow, or point {text} at the file that defines it."
        )
    where = f"{text} ({Path(file).name}, line {_first_line(definition)})"
    flow_names = _names_of_prefect_flow(tree)
    if not any(_is_flow_decorator(decorator, flow_names) for decorator in definition.decorator_list):
        raise ActionLoadError(
            f"{where} is not a Prefect flow; decorate it with @flow (from prefect import flow)."
        )
    if not _accepts_context(definition.args):
        raise ActionLoadError(
            f"{where} does not accept context; add a parameter `context: GlobalContext`, through which "
            "Styrmin passes the deployment's context."
        )
    unpassed = _required_parameters_never_passed(definition.args)
    if unpassed:
        names = ", ".join(argument.arg for argument in unpassed)
        plural = "s" if len(unpassed) > 1 else ""
        raise ActionLoadError(
            f"{text} ({Path(file).name}, line {unpassed[0].lineno}) requires the parameter{plural} {names}, "
            f"which Styrmin never passes: an action receives only {' and '.join(ACTION_PARAMETERS)} "
            f"(each when it declares it). Give {names} a default value, or remove {'them' if plural else 'it'}."
        )


def _parse(path: Path, file: str) -> ast.Module:
    try:
        source = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ActionLoadError(f"{file} is not UTF-8 text; save it as UTF-8.", file_failed=True) from None
    try:
        return ast.parse(source, filename=file)
    except SyntaxError as error:
        line = f" (line {error.lineno})" if error.lineno else ""
        raise ActionLoadError(
            f"{file} is not valid Python: SyntaxError: {error.msg}{line}; fix the error.", file_failed=True
        ) from None
    except (ValueError, RecursionError, MemoryError) as error:  # NUL bytes; nesting past the parser's stack
        raise ActionLoadError(
            f"{file} is not valid Python ({type(error).__name__}: {error}); fix the file.", file_failed=True
        ) from None


def _top_level_definition(tree: ast.Module, name: str) -> ast.stmt | None:
    """The last top-level statement that binds ``name`` (the one in force once the module ran)."""
    found: ast.stmt | None = None
    for statement in tree.body:
        if _binds(statement, name):
            found = statement
    return found


def _binds(statement: ast.stmt, name: str) -> bool:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return statement.name == name
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name.split(".")[0]) == name for alias in statement.names)
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
    if isinstance(statement, ast.AnnAssign | ast.AugAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == name
    return False


def _names_of_prefect_flow(tree: ast.Module) -> set[str]:
    """The dotted names under which the module refers to ``prefect.flow``, from its imports."""
    names = {"flow", _PREFECT_FLOW}
    for statement in ast.walk(tree):
        if isinstance(statement, ast.ImportFrom) and statement.module == "prefect" and statement.level == 0:
            names.update(alias.asname for alias in statement.names if alias.name == "flow" and alias.asname)
        elif isinstance(statement, ast.Import):
            names.update(
                f"{alias.asname}.flow"
                for alias in statement.names
                if alias.name == "prefect" and alias.asname
            )
    return names


def _is_flow_decorator(decorator: ast.expr, flow_names: set[str]) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return _dotted(target) in flow_names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        parent = _dotted(node.value)
        return f"{parent}.{node.attr}" if parent else None
    return None


def _accepts_context(arguments: ast.arguments) -> bool:
    named = [*arguments.args, *arguments.kwonlyargs]
    return arguments.kwarg is not None or any(argument.arg == "context" for argument in named)


def _required_parameters_never_passed(arguments: ast.arguments) -> list[ast.arg]:
    """The parameters without a default that the agent does not pass: it passes ACTION_PARAMETERS by
    name, so a positional-only parameter is never passed either."""
    positional = [*arguments.posonlyargs, *arguments.args]
    required = positional[: len(positional) - len(arguments.defaults)]
    unpassed = [
        argument
        for argument in required
        if argument in arguments.posonlyargs or argument.arg not in ACTION_PARAMETERS
    ]
    unpassed += [
        argument
        for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if default is None and argument.arg not in ACTION_PARAMETERS
    ]
    return unpassed


def _first_line(definition: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The line where the definition starts: its first decorator's, as Python reports it."""
    return min([definition.lineno, *(decorator.lineno for decorator in definition.decorator_list)])


def _location_text(location: str | Action) -> str:
    return location.location if isinstance(location, Action) else location
