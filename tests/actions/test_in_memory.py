"""The seed's upgrade action and the primitives' rules on the in-memory backend: a driver author's fast tests.

Each test runs one action with ``styrmin_backend.testing.Context`` against a ``State`` and asserts what
the hook step and the deployment would show: the ordered effects, the started tasks, the notes, the
stored output and the resulting state. The same rules run on the whole stack in the slow tests.
"""

from __future__ import annotations

import pytest

from styrmin_backend.actions import (
    GlobalContext,
    execute_commands,
    get_component_images,
    start_components,
    stop_components,
    upgrade_deployment_version,
)
from styrmin_backend.domain.limits import OUTPUT_TAIL_MAX_BYTES, OUTPUT_TAIL_MAX_LINES, REDACTED
from styrmin_backend.testing import (
    ACTIONS_TOKEN,
    CommandOutcome,
    Component,
    ComponentsStarted,
    ComponentsStopped,
    Container,
    Context,
    DeploymentUpgraded,
    Job,
    JobDeleted,
    JobStarted,
    NoteAdded,
    OutputStored,
    State,
)
from tests.support import seed_actions
from tests.support.drivers import EXAMPLE_DRIVER

DIGEST = "sha256:" + "ab" * 32
SETUP_JOB = "shop-migrate-0a1b"


def shop(server_image: str = "example.com/shop/server:{{ app.version }}", **changes: object) -> State:
    """The example shop at 1.0.0 after its create: both components run, the setup Job was left."""
    state = State(
        app_version="1.0.0",
        components=[
            Component(
                "server",
                [
                    Container("server", server_image, env={"SHOP_DATABASE": "/data/shop.sqlite3"}),
                    Container("log-shipper", "example.com/log-shipper:3"),
                ],
                init_containers=[Container("wait", "example.com/wait:1")],
            ),
            Component(
                "task-worker", [Container("task-worker", "example.com/shop/task-worker:{{ app.version }}")]
            ),
        ],
        jobs=[Job(SETUP_JOB, task_id=1, command=("shop", "migrate"))],
    )
    return State(**{**state.__dict__, **changes})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ctx() -> Context:
    context = Context(EXAMPLE_DRIVER, deployment="shop")
    context.load("upgrade")  # import Prefect and the actions once, before the tests
    return context


def test_seed_upgrade_action_stops_upgrades_migrates_at_the_target_and_starts_in_that_order(
    ctx: Context,
) -> None:
    result = ctx.run("upgrade", shop(), target_version="2.0.0")

    assert result.error is None
    assert result.effects == [
        ComponentsStopped(("task-worker",)),
        DeploymentUpgraded(app_version="2.0.0", driver_version="1.0.0"),
        JobDeleted(SETUP_JOB),
        NoteAdded(
            f"Deleted Job {SETUP_JOB}, left by an earlier action (it succeeded), before starting a new one."
        ),
        JobStarted(("shop", "migrate"), "example.com/shop/server:2.0.0"),
        ComponentsStarted(("task-worker",)),
    ]
    assert [(t.type.value, t.status.value) for t in result.started_tasks] == [
        ("stop", "succeeded"),
        ("upgrade", "succeeded"),
        ("start", "succeeded"),
    ]
    assert result.notes == [
        f"Deleted Job {SETUP_JOB}, left by an earlier action (it succeeded), before starting a new one."
    ]
    assert result.output_tail is None
    assert result.state.app_version == "2.0.0"
    assert all(c.running for c in result.state.components)
    (job,) = result.state.jobs  # the migration's Job replaced the setup's, and stays for kubectl
    assert job.name.startswith("shop-migrate-") and job.name != SETUP_JOB and job.output_read


def test_the_seed_text_runs_unchanged_and_migrates_with_the_server_env(ctx: Context) -> None:
    configuration = {"env": {"server": {"SHOP_LOG": "debug"}}}
    result = ctx.run(seed_actions.upgrade, shop(), target_version="2.0.0", configuration=configuration)

    assert result.error is None
    migrate = result.effects[4]
    assert migrate == JobStarted(("infrahub", "db", "migrate"), "example.com/shop/server:2.0.0")
    assert isinstance(migrate, JobStarted)
    # The component container's env as the workload has it, the new configuration's on top.
    assert migrate.env == {"SHOP_DATABASE": "/data/shop.sqlite3", "SHOP_LOG": "debug"}


def test_changing_the_order_of_the_calls_changes_what_the_test_sees(ctx: Context) -> None:
    """The order assertion above can fail: a migration run before the workers stop is caught."""

    async def migrate_first(context: GlobalContext, target_version: str) -> None:
        await upgrade_deployment_version(target_version=target_version, context=context)
        images = await get_component_images(component="server", context=context)
        await execute_commands(
            ["shop", "migrate"], image=images[0], context=context, env_from_component="server"
        )
        await stop_components(components=["task-worker"], context=context)
        await start_components(components=["task-worker"], context=context)

    result = ctx.run(migrate_first, shop(), target_version="2.0.0")

    assert result.error is None
    assert [type(e).__name__ for e in result.effects] == [
        "DeploymentUpgraded",
        "JobDeleted",
        "NoteAdded",
        "JobStarted",
        "ComponentsStopped",
        "ComponentsStarted",
    ]


@pytest.mark.parametrize(
    ("server_image", "configuration", "migration_image"),
    [
        pytest.param(
            "example.com/shop/server:{{ app.version }}", {}, "example.com/shop/server:2.0.0", id="chart"
        ),
        pytest.param(
            "registry.local:5000/shop/server:{{ app.version }}",
            {},
            "registry.local:5000/shop/server:2.0.0",
            id="registry-port",
        ),
        pytest.param(
            f"example.com/shop/server:1.0.0@{DIGEST}", {}, "example.com/shop/server:2.0.0", id="digest"
        ),
        pytest.param(
            "example.com/shop/server:{{ app.version }}",
            {"images": {"server": "registry.local:5000/shop/server:{{ app.version }}-debug"}},
            "registry.local:5000/shop/server:2.0.0",
            id="override",
        ),
    ],
)
def test_the_migration_runs_the_servers_image_at_the_target(
    ctx: Context, server_image: str, configuration: dict[str, object], migration_image: str
) -> None:
    result = ctx.run("upgrade", shop(server_image), target_version="2.0.0", configuration=configuration)

    assert result.error is None
    started = [e for e in result.effects if isinstance(e, JobStarted)]
    assert started == [JobStarted(("shop", "migrate"), migration_image)]


def test_images_are_the_component_container_first_then_pod_order_without_init_containers(
    ctx: Context,
) -> None:
    async def read(context: GlobalContext) -> list[str]:
        return await get_component_images(component="server", context=context)

    state = shop(
        components=[
            Component(
                "server",
                [
                    Container("log-shipper", "example.com/log-shipper:3"),
                    Container("server", "example.com/shop/server:1.0.0"),
                ],
                init_containers=[Container("wait", "example.com/wait:1")],
            )
        ]
    )
    plain = ctx.run(read, state, target_version="2.1.0")
    override = ctx.run(
        read,
        state,
        target_version="2.1.0",
        configuration={"images": {"server": "r.local:5000/s:{{ app.version }}"}},
    )

    assert plain.returned == ["example.com/shop/server:1.0.0", "example.com/log-shipper:3"]
    # The new configuration's override comes first, at the target, before the workload has it.
    assert override.returned == ["r.local:5000/s:2.1.0", "example.com/log-shipper:3"]
    assert plain.effects == [] and override.effects == []


def test_a_failing_migration_stores_the_redacted_end_of_its_output_and_leaves_the_workers_stopped(
    ctx: Context,
) -> None:
    output = (
        f"migrating rows, leaked {ACTIONS_TOKEN}\n" * 200_000
        + "Migration 0042 failed: table users is locked\n"
    )
    state = shop(commands={"shop migrate": CommandOutcome(exit_code=5, output=output)})

    result = ctx.run("upgrade", state, target_version="2.0.0")

    assert result.error is not None and result.error.startswith("Job shop-migrate-")
    assert "exited with code 5. Its last line: Migration 0042 failed: table users is locked" in result.error
    assert result.error.endswith("The end of its output is stored on the hook step.")
    assert result.output_truncated is True
    tail = result.output_tail or ""
    assert len(tail.encode()) <= OUTPUT_TAIL_MAX_BYTES and len(tail.splitlines()) == OUTPUT_TAIL_MAX_LINES
    assert set(tail.splitlines()[:-1]) == {f"migrating rows, leaked {REDACTED}"}
    assert [t.type.value for t in result.started_tasks] == ["stop", "upgrade"]  # no start after the failure
    assert isinstance(result.effects[-1], OutputStored)
    assert not result.state.component("task-worker").running


def test_a_job_still_running_from_another_change_fails_the_action_saying_to_wait(ctx: Context) -> None:
    state = shop(jobs=[Job("shop-migrate-0000", task_id=7, running=True)])

    result = ctx.run("upgrade", state, target_version="2.0.0")

    assert result.error == (
        'Job shop-migrate-0000 of an earlier action of deployment "shop" is still running (task 7). '
        "Wait for it to end, then request the change again."
    )
    assert not any(isinstance(e, JobStarted | JobDeleted) for e in result.effects)


def test_upgrade_to_the_version_the_deployment_runs_starts_no_task(ctx: Context) -> None:
    async def upgrade_again(context: GlobalContext, target_version: str) -> object:
        return await upgrade_deployment_version(target_version=target_version, context=context)

    result = ctx.run(upgrade_again, shop(), target_version="1.0.0")

    assert (result.error, result.returned, result.started_tasks, result.effects) == (None, None, [], [])


def test_a_failed_started_task_fails_the_action_with_its_error(ctx: Context) -> None:
    state = shop(failing_tasks={"upgrade": "Helm upgrade failed: image not found"})

    result = ctx.run("upgrade", state, target_version="2.0.0")

    assert result.error == (
        'upgrade_deployment_version("2.0.0") of deployment "shop": task 102 (upgrade) failed: '
        "Helm upgrade failed: image not found"
    )
    assert [(t.type.value, t.status.value) for t in result.started_tasks] == [
        ("stop", "succeeded"),
        ("upgrade", "failed"),
    ]
    assert result.state.app_version == "1.0.0"


def test_when_styrmin_actions_is_read_only_the_action_fails_saying_why(ctx: Context) -> None:
    result = ctx.run("upgrade", shop(actions_user="read-only"), target_version="2.0.0")

    assert result.error is not None and result.error.startswith(
        'stop_components(["task-worker"]) of deployment "shop" was refused by the Styrmin API: '
        'User "styrmin-actions" has the role Read-only; this needs Read/write.'
    )
    assert result.started_tasks == [] and result.effects == []


def test_an_unknown_component_names_the_drivers_components(ctx: Context) -> None:
    async def read(context: GlobalContext) -> list[str]:
        return await get_component_images(component="database", context=context)

    result = ctx.run(read, shop())

    assert (
        result.error
        == 'Driver shop@1.0.0 has no component "database"; its components are: server, task-worker.'
    )


def test_a_component_without_workload_says_to_read_it_once_the_chart_is_installed(ctx: Context) -> None:
    result = ctx.run("initialize_database", shop(components=[]), target_version="1.0.0")

    assert result.error is not None and result.error.startswith(
        'Component "server" of deployment "shop" has no workload: Deployment shop-server is not in namespace "shop".'
    )


def test_the_fast_path_example_of_the_docs_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (EXAMPLE_DRIVER.parents[2] / "docs" / "testing-drivers.md").read_text()
    fast_path = text[text.index("## The fast path") :]
    example = fast_path[fast_path.index("```python\n") + len("```python\n") : fast_path.index("\n```\n")]
    monkeypatch.chdir(EXAMPLE_DRIVER.parents[2])
    exec(compile(example, "docs/testing-drivers.md", "exec"), {})  # noqa: S102 (its asserts are the test)


async def run_migration(context: GlobalContext) -> object:
    return await execute_commands(["shop", "migrate"], image="example.com/shop/server:2.0.0", context=context)


def test_jobs_of_the_same_change_are_left_alone_until_their_action_has_read_them(ctx: Context) -> None:
    same_change = [
        Job("shop-migrate-aaaa", task_id=100, running=True),  # another action of this hook, running
        Job("shop-migrate-bbbb", task_id=100, output_read=False),  # ended, its action still reading
        Job("shop-migrate-cccc", task_id=100, succeeded=False),  # ended and read: may go
    ]

    result = ctx.run(run_migration, shop(jobs=same_change))

    assert result.error is None
    assert result.effects[:2] == [
        JobDeleted("shop-migrate-cccc"),
        NoteAdded(
            "Deleted Job shop-migrate-cccc, left by an earlier action (it failed), before starting a new one."
        ),
    ]
    assert {j.name for j in result.state.jobs} >= {"shop-migrate-aaaa", "shop-migrate-bbbb"}


def test_a_command_that_never_ran_gives_kubernetes_reason_instead_of_an_exit_code(ctx: Context) -> None:
    outcome = CommandOutcome(exit_code=None, reason="ErrImagePull: example.com/shop/server:2.0.0 not found")

    result = ctx.run(run_migration, shop(commands={"shop migrate": outcome}))

    assert result.error is not None
    assert result.error.endswith(
        "failed before its command 'shop migrate' ended: ErrImagePull: example.com/shop/server:2.0.0 not found"
    )
    assert result.effects[-1] == OutputStored("", False)


def test_a_command_past_its_timeout_says_kubernetes_stopped_it(ctx: Context) -> None:
    outcome = CommandOutcome(exit_code=137, output="migrating...\n", timed_out=True)

    result = ctx.run(run_migration, shop(commands={"shop migrate": outcome}))

    assert (
        result.error is not None
        and "did not end within 3600 seconds, the timeout of its command" in result.error
    )
    assert result.output_tail == "migrating...\n"


def test_a_string_command_is_scripted_by_the_string_itself(ctx: Context) -> None:
    async def migrate(context: GlobalContext) -> None:
        await execute_commands("shop migrate", image="example.com/shop/server:1.0.0", context=context)

    result = ctx.run(migrate, shop(commands={"shop migrate": CommandOutcome(exit_code=3, output="locked\n")}))

    assert result.error is not None
    assert "exited with code 3. Its last line: locked" in result.error
    assert result.output_tail == "locked\n"


def test_a_failing_task_key_that_is_no_task_type_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError) as raised:
        State(app_version="1.0.0", failing_tasks={"Upgrade": "boom"})

    assert str(raised.value) == (
        "State(failing_tasks=...): 'Upgrade' is not a type of task an action starts; use one of "
        "'stop', 'start', 'upgrade', 'backup', e.g. failing_tasks={\"upgrade\": \"Helm upgrade failed: ...\"}."
    )
