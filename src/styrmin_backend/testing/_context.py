"""Run one action of a driver against an in-memory deployment, in milliseconds: the driver author's fast path.

>>> from styrmin_backend.testing import Component, Container, Context, State
>>> ctx = Context("examples/drivers/shop")
>>> state = State(
...     app_version="1.0.0",
...     components=[
...         Component("server", [Container("server", "example.com/shop/server:{{ app.version }}")]),
...         Component("task-worker", [Container("task-worker", "example.com/shop/task-worker:1.0.0")]),
...     ],
... )
>>> result = ctx.run("upgrade", state, target_version="2.0.0")
>>> [t.type.value for t in result.started_tasks]
['stop', 'upgrade', 'start']
>>> result.state.app_version
'2.0.0'
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import styrmin
from styrmin_backend.actions import GlobalContext
from styrmin_backend.actions._backend import use_backend
from styrmin_backend.actions.errors import action_error_text
from styrmin_backend.domain.backups import backup_key
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.drivers import (
    SPEC_FILE_NAME,
    Action,
    DeploymentConfiguration,
    DriverSpec,
    load_action_flow,
    load_driver_spec,
)
from styrmin_backend.testing._memory import Effect, MemoryBackend, NoteAdded, OutputStored, State
from styrmin_backend.testing._modules import DriverModules

DEPLOYMENT_ID = 1
TASK_ID = 100
"""The id of the task of the change the action runs for; the tasks it starts follow it."""
HOOK_STEP_ID = 1000

_TASK_OF_HOOK = {
    Hook.SETUP: styrmin.TaskType.CREATE,
    Hook.UPGRADE: styrmin.TaskType.UPGRADE,
    Hook.BACKUP: styrmin.TaskType.BACKUP,
    Hook.RESTORE: styrmin.TaskType.RESTORE,
}


@dataclass
class Result:
    """What one action did, as the hook step and the deployment would show it.

    Attributes:
        state: the deployment after the action (versions, running components, Jobs).
        effects: everything the primitives did, in order (tasks started, Jobs, notes, output).
        started_tasks: the tasks linked to the hook step, with their status and error.
        notes: the hook step's notes.
        output_tail: the end of a failed command's output stored on the hook step, if any.
        output_truncated: whether earlier output was cut.
        error: the action's error, as its step shows it after "Action NAME failed: "; None if it succeeded.
        exception: the exception the action raised, if any.
        returned: what the action returned.
        log: what the primitives logged.
        context: the GlobalContext the action was given.
    """

    state: State
    effects: list[Effect]
    started_tasks: list[styrmin.StartedTask]
    context: GlobalContext
    error: str | None = None
    exception: BaseException | None = None
    returned: Any = None
    log: list[str] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        return [e.note for e in self.effects if isinstance(e, NoteAdded)]

    @property
    def output_tail(self) -> str | None:
        stored = [e for e in self.effects if isinstance(e, OutputStored)]
        return stored[-1].tail if stored else None

    @property
    def output_truncated(self) -> bool:
        stored = [e for e in self.effects if isinstance(e, OutputStored)]
        return stored[-1].truncated if stored else False


class Context:
    """A driver's actions, run one at a time against an in-memory deployment.

    ``driver`` is the driver's folder (with ``driver.styrmin.yml``), or its spec when the actions are
    given as functions. ``deployment`` names the deployment (its Helm release and namespace).
    """

    def __init__(self, driver: Path | str | DriverSpec, *, deployment: str = "shop") -> None:
        if isinstance(driver, DriverSpec):
            self.folder: Path | None = None
            self.spec = driver
        else:
            self.folder = Path(driver)
            self.spec = load_driver_spec((self.folder / SPEC_FILE_NAME).read_text())
        # Its own modules (helpers.py), apart from another Context's driver's of the same name.
        self._modules = DriverModules(self.folder) if self.folder is not None else None
        self.deployment = deployment
        self._functions: dict[str, Callable[..., Any]] = {}

    def action(self, name: str) -> Action:
        """The action ``name`` declared in the driver's spec."""
        for action in self.spec.spec.actions:
            if action.name == name:
                return action
        names = ", ".join(a.name for a in self.spec.spec.actions) or "none"
        raise KeyError(f'Driver {self.spec.metadata.name} has no action "{name}"; its actions: {names}.')

    def run(
        self,
        action: str | Callable[..., Any],
        state: State,
        *,
        target_version: str | None = None,
        driver_version: str | None = None,
        configuration: Mapping[str, Any] | DeploymentConfiguration | None = None,
        hook: Hook | str | None = None,
        mode: Mode | str | None = None,
    ) -> Result:
        """Run ``action`` (its name in the spec, or the function itself) for a change of ``state``.

        ``target_version`` is the application version the change moves to (default: the one ``state``
        runs), ``driver_version`` the change's driver version (default: the spec's), ``configuration``
        the change's new configuration (default: ``state``'s). The action's error is returned in
        ``Result.error``, not raised, as a hook step records it.
        """
        return asyncio.run(
            self.arun(
                action,
                state,
                target_version=target_version,
                driver_version=driver_version,
                configuration=configuration,
                hook=hook,
                mode=mode,
            )
        )

    async def arun(
        self,
        action: str | Callable[..., Any],
        state: State,
        *,
        target_version: str | None = None,
        driver_version: str | None = None,
        configuration: Mapping[str, Any] | DeploymentConfiguration | None = None,
        hook: Hook | str | None = None,
        mode: Mode | str | None = None,
    ) -> Result:
        """:meth:`run` from a running event loop (an async test)."""
        function, declared_hook, declared_mode = self._function(action)
        the_hook = Hook(hook or declared_hook)
        the_mode = Mode(mode or declared_mode)
        new_configuration = _configuration(
            configuration if configuration is not None else state.configuration
        )
        change_driver_version = driver_version or self.spec.metadata.version
        target = target_version or state.app_version
        context = GlobalContext(
            deployment_id=DEPLOYMENT_ID,
            deployment_name=self.deployment,
            namespace=self.deployment,
            cluster_id="memory",
            driver_name=self.spec.metadata.name,
            driver_version=change_driver_version,
            current_app_version=None if the_hook == Hook.SETUP else state.app_version,
            target_app_version=target,
            configuration=new_configuration,
            revision=2,
            task_id=TASK_ID,
            hook_step_id=HOOK_STEP_ID,
            hook=the_hook,
            mode=the_mode,
            api_url="memory://styrmin",
            **_backup_fields(the_hook, self.deployment),
        )
        if state.driver_version is None:
            state = replace(state, driver_version=self.spec.metadata.version)
        backend = MemoryBackend(
            self.spec,
            state,
            deployment=self.deployment,
            driver_version=change_driver_version,
            configuration=new_configuration,
            task_type=_TASK_OF_HOOK[the_hook],
            task_id=TASK_ID,
            hook_step_id=HOOK_STEP_ID,
            hook_step_name=hook_step_name(the_hook, the_mode),
        )
        arguments = _arguments(function, context, target)
        result = Result(state, backend.effects, [], context, log=backend.messages)
        from prefect.logging import disable_run_logger

        with use_backend(backend), disable_run_logger(), self._own_modules():
            try:
                returned = function(**arguments)
                if inspect.isawaitable(returned):
                    returned = await returned
                result.returned = returned
            except Exception as error:  # a primitive's ActionError, or the action's own failure
                result.error, result.exception = action_error_text(error), error
        result.state = backend.state
        result.started_tasks = [
            styrmin.StartedTask(id=t.id, type=t.type, status=t.status, error=t.error) for t in backend.started
        ]
        return result

    def _function(self, action: str | Callable[..., Any]) -> tuple[Callable[..., Any], str, str]:
        if not isinstance(action, str):
            return getattr(action, "fn", action), Hook.UPGRADE.value, Mode.CORE.value
        declared = self.action(action)
        return self.load(action), declared.hook.value, declared.mode.value

    def load(self, name: str) -> Callable[..., Any]:
        """The function of action ``name``, its file imported as the agent imports it (once per Context).

        Importing an action file imports Prefect, which takes seconds the first time in a process: a
        module-scoped fixture can load the actions up front.
        """
        declared = self.action(name)
        if self.folder is None:
            raise ValueError("Context(spec) has no folder to load actions from; pass the function itself.")
        if declared.location not in self._functions:
            with self._own_modules():
                self._functions[declared.location] = load_action_flow(self.folder, declared).fn
        return self._functions[declared.location]

    def _own_modules(self) -> AbstractContextManager[None]:
        """The driver's own modules importable while an action loads or runs (see ``_modules``)."""
        return self._modules.active() if self._modules is not None else nullcontext()


BACKUP_ID = 1
"""The backup a backup or restore action runs for in memory."""


def _backup_fields(hook: Hook, deployment: str) -> dict[str, Any]:
    """The context's backup id and folder in the backup and restore hooks, as the agent gives them."""
    if hook not in (Hook.BACKUP, Hook.RESTORE):
        return {}
    return {"backup_id": BACKUP_ID, "backup_folder": f"/styrmin-backups/{backup_key(deployment, BACKUP_ID)}"}


def _configuration(value: Mapping[str, Any] | DeploymentConfiguration) -> DeploymentConfiguration:
    if isinstance(value, DeploymentConfiguration):
        return value
    return DeploymentConfiguration.model_validate(dict(value))


def _arguments(function: Callable[..., Any], context: GlobalContext, target: str) -> dict[str, Any]:
    """``context`` and ``target_version``, each only when the function accepts it (as the agent passes them)."""
    parameters = inspect.signature(function).parameters
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    offered = {"context": context, "target_version": target}
    return {name: value for name, value in offered.items() if accepts_any or name in parameters}
