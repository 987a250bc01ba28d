"""The async twin against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from styrmin import (
    AsyncClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    Role,
    Task,
    TaskStatus,
    TaskType,
    ValidationError,
)

from .server import ADMIN_PASSWORD, LiveServer, in_background, run_task, unique, write_invalid_driver


async def test_the_async_client_covers_the_same_calls(live_server: LiveServer, tmp_path: Path) -> None:
    async with AsyncClient(live_server.url, "") as client:
        await client.login("admin", ADMIN_PASSWORD)
        me = await client.whoami()
        assert me.role == Role.ADMIN
        assert any(d.name == "demo" for d in await client.drivers.list())
        assert (await client.drivers.get("demo", "1.0.0")).application.default_version == "1.0.0"
        with pytest.raises(ValidationError) as invalid:
            await client.drivers.push(write_invalid_driver(tmp_path / "broken"))
        assert len(invalid.value.errors) >= 2
        name = unique("shop")
        created = await client.deployments.create(name, namespace=name, driver="demo", driver_version="1.0.0")
        assert created.task is not None and created.task.type == TaskType.CREATE
        with pytest.raises(ConflictError):
            await client.deployments.create(name, namespace=name, driver="demo", driver_version="1.0.0")
        assert (await client.deployments.get(name)).revision == 1
        assert (await client.deployments.upgrade(name, app_version="2.0.0")).task is not None
        assert (await client.deployments.configure(name, {"values": {"a": 1}})).task is not None
        assert (await client.deployments.stop(name, ["server"])).deployment.stopped_components == ["server"]
        assert (await client.deployments.start(name, ["server"])).deployment.stopped_components == []
        ids = [t.id async for t in client.tasks.iter(deployment=name, page_size=2)]
        assert len(ids) == 5 and ids == sorted(ids, reverse=True)
        assert (await client.tasks.list(deployment=name, limit=1)).next_before is not None
        username = unique("carol")
        await client.users.create(username, role="read-only", password="a-long-password")
        assert (await client.users.set_role(username, Role.ADMIN)).role == Role.ADMIN
        assert not (await client.users.deactivate(username)).active
        assert (await client.users.activate(username)).active
        await client.users.set_password(username, "another-long-password")
        assert (await client.users.reset_password(username)).password
        assert any(u.username == username for u in await client.users.list())
        assert (await client.deployments.delete(name)).task is not None
        with pytest.raises(NotFoundError):
            await client.tasks.get(987654321)
        await client.logout()
        with pytest.raises(AuthenticationError):
            await client.whoami()


async def test_async_wait_takes_sync_and_async_callbacks(live_server: LiveServer) -> None:
    async with AsyncClient(live_server.url, live_server.admin_token()) as client:
        name = unique("shop")
        change = await client.deployments.create(name, namespace=name, driver="demo", driver_version="1.0.0")
        assert change.task is not None
        seen: list[TaskStatus] = []

        async def on_progress(task: Task) -> None:
            await asyncio.sleep(0)
            seen.append(task.status)

        worker = in_background(run_task, live_server, change.task.id, pause=0.3)
        task = await client.tasks.wait(change.task.id, on_progress=on_progress, interval=0.05, timeout=30)
        await asyncio.to_thread(worker.join)
        assert task.status == TaskStatus.SUCCEEDED
        assert seen[0] == TaskStatus.PENDING and seen[-1] == TaskStatus.SUCCEEDED
        plain: list[Task] = []
        again = await client.tasks.wait(change.task.id, on_progress=plain.append)
        assert plain == [again]
