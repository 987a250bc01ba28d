"""Backup schedules: set through the API, started once per due time whatever the number of servers (on
SQLite and PostgreSQL), and retention that deletes old scheduled backups through delete-backup tasks."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import backup_schedules
from styrmin_backend.store.models import BackupRow, BackupScheduleRow, TaskRow

from .conftest import Stack
from .test_backups import FILES, _admin, _backup, _deployed_shop, _run_next

URL = "/api/v1/deployments/shop/backup-schedule"


def _make_due(stack: Stack) -> None:
    with stack.session() as session:
        session.execute(update(BackupScheduleRow).values(next_run_at=utcnow() - timedelta(minutes=1)))


def test_a_schedule_is_set_read_and_removed_by_read_write_users_only(stack: Stack) -> None:
    _deployed_shop(stack)
    reader = stack.headers(stack.make_user("reader", Role.READ_ONLY))
    assert stack.client.get(URL, headers=_admin(stack)).status_code == 404

    set_ = stack.client.put(URL, json={"cron": "0 3 * * *", "keep_count": 7}, headers=_admin(stack))

    assert set_.status_code == 200, set_.text
    assert (set_.json()["cron"], set_.json()["keep_count"], set_.json()["keep_days"]) == (
        "0 3 * * *",
        7,
        None,
    )
    assert set_.json()["next_run_at"].endswith("T03:00:00Z") or "T03:00:00" in set_.json()["next_run_at"]
    assert stack.client.get(URL, headers=reader).json()["cron"] == "0 3 * * *"
    assert stack.client.put(URL, json={"cron": "* * * * *"}, headers=reader).status_code == 403
    assert stack.client.delete(URL, headers=reader).status_code == 403
    assert stack.client.delete(URL, headers=_admin(stack)).status_code == 204
    assert stack.client.get(URL, headers=reader).status_code == 404


def test_a_schedule_that_is_not_valid_is_refused_naming_the_field(stack: Stack) -> None:
    _deployed_shop(stack)
    for body, field in (
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "every day"}, "cron"),
        ({"cron": "0 3 * * *", "keep_count": 0}, "keep_count"),
        ({"cron": "0 3 * * *", "keep_days": 100000}, "keep_days"),
    ):
        response = stack.client.put(URL, json=body, headers=_admin(stack))
        assert response.status_code == 422, (body, response.text)
        assert response.json()["field"] == field
    assert stack.client.get(URL, headers=_admin(stack)).status_code == 404


def test_a_due_backup_starts_once_when_two_servers_see_it_due(stack: Stack) -> None:
    _deployed_shop(stack)
    stack.client.put(URL, json={"cron": "*/5 * * * *"}, headers=_admin(stack))
    _make_due(stack)
    now = utcnow()

    with stack.session() as first, stack.session() as second:
        seen_by_first = backup_schedules.due_schedules(first, now)
        seen_by_second = backup_schedules.due_schedules(second, now)
        assert len(seen_by_first) == len(seen_by_second) == 1
        started_by_first = backup_schedules.start_due_backup(first, *seen_by_first[0], now)
        first.commit()
        started_by_second = backup_schedules.start_due_backup(second, *seen_by_second[0], now)

    assert started_by_first is not None and started_by_second is None
    with stack.session() as session:
        (backup,) = session.scalars(select(BackupRow)).all()
        assert (backup.label, backup.requested_by) == ("scheduled", "admin")
        schedule = session.scalars(select(BackupScheduleRow)).one()
        assert schedule.next_run_at > now and schedule.last_started_at is not None
    # Not due any more: the next tick of either server starts nothing.
    with stack.session() as session:
        assert backup_schedules.run_schedules(session, now) == ([], [])


def test_retention_deletes_old_scheduled_backups_through_tasks_and_keeps_the_others(stack: Stack) -> None:
    agent = _deployed_shop(stack)
    manual = _backup(stack, agent, result={"backup": {"location": "folder /srv", "files": FILES}})
    stack.client.put(URL, json={"cron": "0 3 * * *"}, headers=_admin(stack))
    scheduled = []
    for _ in range(3):
        _make_due(stack)
        with stack.session() as session:
            started, _ = backup_schedules.run_schedules(session)
        scheduled += started
        _run_next(stack, agent, result={"backup": {"location": "folder /srv", "files": FILES}})
    stack.client.put(URL, json={"cron": "0 3 * * *", "keep_count": 1}, headers=_admin(stack))

    with stack.session() as first, stack.session() as second:
        pruned_by_first = backup_schedules.run_schedules(first)[1]
        first.commit()
        pruned_by_second = backup_schedules.run_schedules(second)[1]

    assert pruned_by_first == scheduled[:2] and pruned_by_second == []
    with stack.session() as session:
        statuses = {row.id: row.status for row in session.scalars(select(BackupRow))}
        deletes = session.scalars(select(TaskRow).where(TaskRow.type == "delete-backup")).all()
    assert statuses == {
        manual["id"]: "succeeded",
        scheduled[0]: "deleting",
        scheduled[1]: "deleting",
        scheduled[2]: "succeeded",
    }
    assert len(deletes) == 2
