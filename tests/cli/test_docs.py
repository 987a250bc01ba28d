"""docs/cli.md names every command, and documents every field that -o json prints."""

from __future__ import annotations

from pathlib import Path

import typer.main
from pydantic import BaseModel

from styrmin import (
    Backup,
    Deployment,
    Driver,
    DriverReport,
    StartedBy,
    StartedTask,
    Step,
    Task,
    TaskSummary,
    User,
    WhoAmI,
)
from styrmin.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _commands() -> list[str]:
    root = typer.main.get_command(app)
    found: list[str] = []
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        children = getattr(command, "commands", None)
        if children:
            found += [f"{name} {child}" for child in children]
        else:
            found.append(name)
    return found


def test_every_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    missing = [c for c in _commands() if f"styrminctl {c}" not in text and f"`{c}" not in text]
    assert not missing, f"document these commands in docs/cli.md: {missing}"
    assert len(_commands()) >= 25


def test_every_output_field_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    models: list[type[BaseModel]] = [
        WhoAmI, User, Driver, DriverReport, Deployment, TaskSummary, Task, Step, StartedTask, StartedBy,
        Backup,
    ]  # fmt: skip
    missing = [f"{m.__name__}.{f}" for m in models for f in m.model_fields if f"`{f}`" not in text]
    assert not missing, f"document these fields in docs/cli.md: {missing}"


def test_the_sdk_docs_name_every_public_call() -> None:
    from styrmin import Client

    text = (DOCS / "sdk.md").read_text()
    client = Client("http://127.0.0.1:1", "")
    calls = [f"client.{n}(" for n in ("login", "logout", "whoami")]
    for group in ("drivers", "deployments", "tasks", "users", "backups"):
        resource = getattr(client, group)
        calls += [f"{n}(" for n in dir(resource) if not n.startswith("_")]
    client.close()
    missing = [c for c in calls if c not in text]
    assert not missing, f"document these calls in docs/sdk.md: {missing}"
