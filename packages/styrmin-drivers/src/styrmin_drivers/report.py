"""What validation tells a driver author: each problem with its file, line and field, and a summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from styrmin_drivers.hooks import Hook, Mode

if TYPE_CHECKING:
    from styrmin_drivers.spec import Action, Component


class DriverProblem(BaseModel):
    """One thing wrong with a driver, said so that the author knows where and what to do.

    >>> str(DriverProblem(file="driver.styrmin.yml", line=14, field="spec.actions[1].mode",
    ...                   message='"later" is not a mode; use pre, core or post.'))
    'driver.styrmin.yml, line 14, spec.actions[1].mode: "later" is not a mode; use pre, core or post.'
    """

    model_config = ConfigDict(frozen=True)

    file: str
    line: int | None = None
    field: str | None = None
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f", line {self.line}"
        if self.field:
            where += f", {self.field}"
        return f"{where}: {self.message}"


class ComponentSummary(BaseModel):
    """A component as ``drivers show`` lists it."""

    name: str
    workload_kind: str
    workload_name: str
    container: str | None = None

    @classmethod
    def of(cls, component: Component) -> ComponentSummary:
        """The summary of a component of a spec."""
        return cls(
            name=component.name,
            workload_kind=component.workload.kind,
            workload_name=component.workload.name,
            container=component.container,
        )


class ActionSummary(BaseModel):
    """An action as ``drivers show`` lists it."""

    name: str
    hook: Hook
    mode: Mode
    location: str
    description: str | None = None
    timeout: int

    @classmethod
    def of(cls, action: Action) -> ActionSummary:
        """The summary of an action of a spec."""
        return cls(
            name=action.name,
            hook=action.hook,
            mode=action.mode,
            location=action.location,
            description=action.description,
            timeout=action.timeout,
        )


class DriverReport(BaseModel):
    """The result of validating a driver: every problem found, and what the driver declares."""

    name: str | None = None
    version: str | None = None
    components: list[ComponentSummary] = []
    actions: list[ActionSummary] = []
    problems: list[DriverProblem] = []

    @property
    def valid(self) -> bool:
        return not self.problems

    def text(self) -> str:
        """The report as ``styrminctl drivers validate`` prints it."""
        title = f"{self.name}@{self.version}" if self.name and self.version else "The driver"
        if self.problems:
            count = len(self.problems)
            lines = [f"{title} is not valid: {count} problem{'s' if count != 1 else ''}."]
            lines += [str(problem) for problem in self.problems]
            return "\n".join(lines)
        lines = [f"{title} is valid."]
        lines.append(f"Components ({len(self.components)}):")
        for c in self.components:
            container = f", container {c.container}" if c.container else ""
            lines.append(f"  {c.name}: {c.workload_kind} {c.workload_name}{container}")
        lines.append(f"Actions ({len(self.actions)}):")
        for a in self.actions:
            description = f" - {a.description}" if a.description else ""
            lines.append(f"  {a.name}: {a.hook.value} {a.mode.value}, {a.location}{description}")
        return "\n".join(lines)


class DriverError(Exception):
    """A driver cannot be read or used; ``problems`` says each reason, as validation would."""

    def __init__(self, problems: list[DriverProblem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = problems
