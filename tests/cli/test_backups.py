"""`styrminctl backups` and `deployments restore`: what they print when a deployment cannot be backed up
or a backup does not exist (the whole path with an agent is in tests/actions/test_backups.py)."""

from __future__ import annotations

import json

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
    restore = ctl("deployments", "restore", name, "--backup", "424242", "--wait")
    assert restore.exit_code == 1 and "There is no backup 424242." in restore.stderr
    usage = ctl("deployments", "restore", name)
    assert usage.exit_code == 2 and "--backup" in usage.output
