"""`styrminctl backups` and `deployments restore`: what they print when a deployment cannot be backed up
or a backup does not exist (the whole path with an agent is in tests/actions/test_backups.py)."""

from __future__ import annotations

import json

from tests.sdk.server import in_background

from .conftest import Ctl


def test_a_deployment_whose_driver_has_no_backup_action_is_refused_plainly(ctl: Ctl) -> None:
    name = ctl.deployment()
    refused = ctl("backups", "create", name)
    assert refused.exit_code == 1
    assert (
        f'Deployment "{name}" cannot be backed up: its driver demo@1.0.0 declares no action' in refused.stderr
    )
    listed = ctl("backups", "list", name)
    assert listed.exit_code == 0, listed.output
    assert f"No backups of {name} yet; take one with: styrminctl backups create {name}" in listed.stdout
    assert json.loads(ctl("backups", "list", name, "-o", "json").stdout) == []


def test_unknown_backups_are_named_in_the_error(ctl: Ctl) -> None:
    name = ctl.deployment()
    missing = ctl("backups", "get", "424242")
    assert missing.exit_code == 1 and "There is no backup 424242." in missing.stderr
    restore = ctl("deployments", "restore", name, "--backup", "424242", "--wait", "--yes")
    assert restore.exit_code == 1 and "There is no backup 424242." in restore.stderr
    usage = ctl("deployments", "restore", name)
    assert usage.exit_code == 2 and "--backup" in usage.output


def test_an_admin_sets_a_cluster_location_and_it_waits_for_the_agents_check(ctl: Ctl) -> None:
    cluster = "cli-location"
    shown = ctl("backups", "location", "--cluster", cluster)
    assert shown.exit_code == 0, shown.output
    assert "the agent's own folder (STYRMIN_AGENT_BACKUP_DIR)" in shown.stdout
    bad = ctl("backups", "set-location", "--cluster", cluster, "--bucket", "shop-backups", "--secret", "nope")
    assert bad.exit_code == 1 and "NAMESPACE/NAME" in bad.stderr

    set_ = ctl(
        "backups", "set-location", "--cluster", cluster, "--bucket", "shop-backups", "--prefix", "prod",
        "--endpoint-url", "http://127.0.0.1:9000", "--secret", "styrmin/backup-bucket",
        "--wait", "--timeout", "1",
    )  # fmt: skip

    # No agent serves this cluster: the check never comes, and --wait says so.
    assert set_.exit_code == 1 and "is still being checked; is its agent running?" in set_.stderr
    found = json.loads(ctl("backups", "location", "--cluster", cluster, "-o", "json").stdout)
    assert found["in_use"] is None
    assert (found["latest"]["status"], found["latest"]["secret"]) == ("checking", "styrmin/backup-bucket")
    assert found["latest"]["description"] == "s3://shop-backups/prod at http://127.0.0.1:9000"


def test_a_schedule_is_set_shown_and_removed(ctl: Ctl) -> None:
    name = ctl.deployment()
    set_ = ctl("backups", "set-schedule", name, "--cron", "0 3 * * *", "--keep-count", "3")
    assert set_.exit_code == 0, set_.output
    assert "0 3 * * *" in set_.stdout and "the newest 3 (scheduled backups)" in set_.stdout
    shown = json.loads(ctl("backups", "schedule", name, "-o", "json").stdout)
    assert (shown["cron"], shown["keep_count"], shown["keep_days"]) == ("0 3 * * *", 3, None)
    bad = ctl("backups", "set-schedule", name, "--cron", "61 * * * *")
    assert bad.exit_code == 1 and '"61 * * * *" is not a cron expression' in bad.stderr

    removed = ctl("backups", "remove-schedule", name, "--yes")

    assert removed.exit_code == 0 and f"Removed the backup schedule of {name}." in removed.stdout
    gone = ctl("backups", "schedule", name)
    assert gone.exit_code == 1 and f'Deployment "{name}" has no backup schedule.' in gone.stderr


def test_deleting_an_unknown_backup_names_it(ctl: Ctl) -> None:
    missing = ctl("backups", "delete", "424242", "--wait", "--yes")
    assert missing.exit_code == 1 and "There is no backup 424242." in missing.stderr


def _fail_the_check(ctl: Ctl, cluster: str, error: str) -> None:
    """Record, as the cluster's agent would, that the check of its newest location failed."""
    import time

    from styrmin_backend.services import backup_locations

    for _ in range(400):
        with ctl.server.session() as session:
            checking = backup_locations.next_location_check(session, cluster)
            if checking is not None:
                backup_locations.record_location_check(session, cluster, checking.id, error)
                return
        time.sleep(0.05)
    raise AssertionError("no location to check appeared")


def test_a_failed_check_with_wait_prints_only_the_location_document(ctl: Ctl) -> None:
    cluster = "cli-failed-check"
    checker = in_background(_fail_the_check, ctl, cluster, "/proc/nope: read-only file system")

    result = ctl(
        "backups", "set-location", "--cluster", cluster, "--folder", "/proc/nope",
        "--wait", "--timeout", "120", "-o", "json",
    )  # fmt: skip
    checker.join()

    assert result.exit_code == 1
    location = json.loads(result.stdout)  # one document, else loads refuses
    assert (location["status"], location["error"]) == ("failed", "/proc/nope: read-only file system")
    assert result.stderr == ""
