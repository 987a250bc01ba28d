"""The primitives check their arguments before they do anything: a wrong one fails the action with an
ActionError naming it and what to pass, and no Job, task or note is left behind.

The checks sit in the primitives above the backend, so the agent's backend runs the same ones as the
in-memory backend these tests use.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from styrmin_backend.actions import (
    ActionError,
    GlobalContext,
    create_backup,
    execute_backup_commands,
    execute_commands,
    get_component_images,
    start_components,
    stop_components,
    upgrade_deployment_version,
)
from styrmin_backend.testing import Component, Container, Context, Job, State
from tests.support.drivers import EXAMPLE_DRIVER

IMAGE = "example.com/shop/server:2.0.0"
LEFT_JOB = "shop-migrate-0a1b"

Call = Callable[[GlobalContext], Awaitable[Any]]


def shop() -> State:
    return State(
        app_version="1.0.0",
        components=[
            Component("server", [Container("server", "example.com/shop/server:{{ app.version }}")]),
            Component("task-worker", [Container("task-worker", "example.com/shop/task-worker:1.0.0")]),
        ],
        jobs=[Job(LEFT_JOB, command=("shop", "migrate"))],  # an ended Job the next one would delete
    )


@pytest.fixture(scope="module")
def ctx() -> Context:
    return Context(EXAMPLE_DRIVER, deployment="shop")


WRONG: list[Any] = [
    pytest.param(
        lambda c: execute_commands(["shop", "migrate"], image=IMAGE, context=c, timeout="600"),
        "execute_commands(timeout=...) got '600' (a str); give the seconds as a number, e.g. timeout=600.",
        id="timeout-string",
    ),
    pytest.param(
        lambda c: execute_commands(["shop", "migrate"], image=IMAGE, context=c, timeout=-5),
        "execute_commands(timeout=...) got -5; give at least 1 second, e.g. timeout=600 "
        "(a Job's deadline is a whole number of seconds).",
        id="timeout-negative",
    ),
    pytest.param(
        lambda c: execute_commands(["shop", "migrate"], image=None, context=c),
        "execute_commands(image=...) got None (a NoneType); pass a non-empty string, e.g. image=images[0].",
        id="image-none",
    ),
    pytest.param(
        lambda c: execute_commands(["shop", "migrate"], image="", context=c),
        "execute_commands(image=...) got an empty string; pass a non-empty string, e.g. image=images[0].",
        id="image-empty",
    ),
    pytest.param(
        lambda c: execute_commands(["shop", "migrate"], image=IMAGE, context=c, env={1: "x"}),
        "execute_commands(env=...): the name 1 (an int) is not an env var name; give each name as a "
        "non-empty string without '=', e.g. 'LOG_LEVEL'.",
        id="env-int-key",
    ),
    pytest.param(
        lambda c: execute_commands(["shop", "migrate"], image=IMAGE, context=c, env={"WORKERS": 4}),
        "execute_commands(env=...): WORKERS is 4 (an int); env values are strings: write '4'.",
        id="env-int-value",
    ),
    pytest.param(
        lambda c: execute_commands(["sleep", 5], image=IMAGE, context=c),
        "execute_commands(command=...): part 1 is 5 (an int); every part of the command is a string: write '5'.",
        id="command-int-part",
    ),
    pytest.param(
        lambda c: execute_commands("  ", image=IMAGE, context=c),
        "execute_commands(command=...) got an empty string; give a command, e.g. ['shop', 'migrate'] or "
        "'shop migrate'.",
        id="command-blank",
    ),
    pytest.param(
        lambda c: execute_commands(["shop"], IMAGE, None),
        "execute_commands(context=...) got None (a NoneType); pass the context Styrmin gave the action: "
        "declare it as `context: GlobalContext` and pass context=context.",
        id="context-none",
    ),
    pytest.param(
        lambda c: upgrade_deployment_version(None, context=c),
        "upgrade_deployment_version(target_version=...) got None (a NoneType); pass a non-empty string, "
        "e.g. target_version=target_version.",
        id="upgrade-none",
    ),
    pytest.param(
        lambda c: upgrade_deployment_version(2, context=c),
        "upgrade_deployment_version(target_version=...) got 2 (an int); pass a non-empty string, "
        "e.g. target_version=target_version.",
        id="upgrade-int",
    ),
    pytest.param(
        lambda c: stop_components([], context=c),
        "stop_components(components=...) got an empty list; give at least one component, e.g. ['task-worker'].",
        id="stop-nothing",
    ),
    pytest.param(
        lambda c: start_components(["task-worker", None], context=c),
        "start_components(components=...) got None (a NoneType); pass a non-empty string, e.g. ['task-worker'].",
        id="start-none",
    ),
    pytest.param(
        lambda c: get_component_images("", context=c),
        "get_component_images(component=...) got an empty string; pass a non-empty string, e.g. 'server'.",
        id="images-empty",
    ),
    pytest.param(
        lambda c: create_backup(context="shop"),
        "create_backup(context=...) got 'shop' (a str); pass the context Styrmin gave the action: "
        "declare it as `context: GlobalContext` and pass context=context.",
        id="backup-context",
    ),
]


@pytest.mark.parametrize(("call", "error"), WRONG)
def test_a_wrong_argument_fails_naming_it_before_anything_is_done(
    ctx: Context, call: Call, error: str
) -> None:
    async def action(context: GlobalContext) -> None:
        await call(context)

    result = ctx.run(action, shop(), target_version="2.0.0")

    assert result.error == error
    assert isinstance(result.exception, ActionError)
    # Nothing was started or deleted: the ended Job of the earlier action is still there.
    assert result.effects == []
    assert result.started_tasks == []
    assert [job.name for job in result.state.jobs] == [LEFT_JOB]


def test_backup_commands_check_their_arguments_under_their_own_name(ctx: Context) -> None:
    async def action(context: GlobalContext) -> None:
        await execute_backup_commands(["shop", "backup"], image=IMAGE, context=context, env=["A=1"])

    result = ctx.run(action, shop(), hook="backup", mode="core")

    assert result.error == (
        "execute_backup_commands(env=...) got ['A=1'] (a list); give a dict of names to values, "
        "e.g. {'LOG_LEVEL': 'debug'}."
    )
    assert result.effects == []


def test_a_fractional_timeout_of_at_least_a_second_is_still_accepted(ctx: Context) -> None:
    async def action(context: GlobalContext) -> None:
        await execute_commands(["shop", "migrate"], image=IMAGE, context=context, timeout=1.5)

    assert ctx.run(action, shop()).error is None
