"""`styrminctl users`."""

from __future__ import annotations

import json

from styrmin import AuthenticationError, Client
from tests.sdk.server import unique

from .conftest import Ctl


def test_administrators_manage_users(ctl: Ctl) -> None:
    name = unique("dave")
    created = ctl(
        "users", "create", name, "--role", "read-write", "--password-stdin", input="a-long-password\n"
    )
    assert created.exit_code == 0, created.output
    assert created.stdout.strip() == f"Created {name}: Read/write, active."
    rows = ctl("users", "list").stdout.splitlines()
    assert rows[0].split() == ["USERNAME", "ROLE", "ACTIVE", "BUILT-IN", "PASSWORD", "AGE"]
    assert any(r.split()[:2] == ["styrmin-actions", "Read/write"] and r.split()[3] == "yes" for r in rows)
    listed = json.loads(ctl("users", "list", "-o", "json").stdout)
    assert set(listed[0]) == {"username", "role", "active", "builtin", "has_password", "created_at"}

    assert ctl("users", "set-role", name, "read-only").stdout.strip() == f"Updated {name}: Read-only, active."
    assert ctl("users", "set-role", name, "boss").exit_code == 2
    token = ctl.server.token_for(name)
    assert ctl("users", "deactivate", name).stdout.strip() == f"Deactivated {name}: Read-only, deactivated."
    with Client(ctl.server.url, token) as client:
        try:
            client.whoami()
            raise AssertionError("a deactivated user's token still works")
        except AuthenticationError:
            pass
    assert json.loads(ctl("users", "activate", name, "-o", "json").stdout)["active"] is True

    changed = ctl("users", "set-password", name, "--password-stdin", input="another-long-password\n")
    assert changed.exit_code == 0 and f"Set the password of {name}" in changed.stdout
    with Client(ctl.server.url, "") as client:
        client.login(name, "another-long-password")
    generated = json.loads(ctl("users", "set-password", name, "--generate", "-o", "json").stdout)
    assert generated["username"] == name and generated["password"]
    with Client(ctl.server.url, "") as client:
        client.login(name, generated["password"])

    refused = ctl("users", "set-password", "styrmin-actions", "--password-stdin", input="whatever-password\n")
    assert refused.exit_code == 1 and "error:" in refused.stderr
    not_admin = ctl("users", "create", unique("eve"), "--role", "admin", "--password-stdin",
                    input="a-long-password\n", env={"STYRMIN_TOKEN": token})  # fmt: skip
    assert not_admin.exit_code == 1 and "this needs Admin" in not_admin.stderr
    typed = ctl("users", "create", unique("fay"), "--role", "read-only", input="pw-one-long\npw-one-long\n")
    assert typed.exit_code == 0, typed.output
