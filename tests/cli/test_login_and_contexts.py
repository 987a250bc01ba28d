"""Logging in and out, the 0600 config file with named contexts, and where the server and token come from."""

from __future__ import annotations

import json
import stat

import yaml

from styrmin import AuthenticationError, Client
from tests.sdk.server import ADMIN_PASSWORD

from .conftest import Ctl


def _login(ctl: Ctl, *extra: str, password: str = ADMIN_PASSWORD) -> str:
    result = ctl(
        "login", ctl.server.url, "-u", "admin", "--password-stdin", *extra, input=password + "\n", auth=False
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_login_keeps_the_server_and_token_in_a_private_config_file(ctl: Ctl) -> None:
    out = _login(ctl)
    host = ctl.server.url.removeprefix("http://")
    assert f"Logged in to {ctl.server.url} as admin." in out
    assert f'Context "{host}" is current' in out
    assert stat.S_IMODE(ctl.config.stat().st_mode) == 0o600
    data = yaml.safe_load(ctl.config.read_text())
    assert data["current-context"] == host
    [context] = data["contexts"]
    assert (context["name"], context["server"], context["user"]) == (host, ctl.server.url, "admin")
    with Client(ctl.server.url, context["token"]) as client:
        assert client.whoami().username == "admin"
    who = ctl("whoami", auth=False)
    assert who.exit_code == 0, who.output
    assert f'admin (Admin) at {ctl.server.url} (context "{host}")' in who.stdout
    assert json.loads(ctl("whoami", "-o", "json", auth=False).stdout) == {
        "username": "admin",
        "role": "admin",
        "builtin": False,
        "token_kind": "api",
    }


def test_a_wrong_password_exits_1_and_stores_nothing(ctl: Ctl) -> None:
    result = ctl(
        "login", ctl.server.url, "-u", "admin", "--password-stdin", input="wrong-password\n", auth=False
    )
    assert result.exit_code == 1
    assert "error: The user name or password is wrong." in result.stderr
    assert "Log in again" not in result.stderr  # this was the login
    assert not ctl.config.exists()


def test_contexts_switch_between_servers_and_users(ctl: Ctl) -> None:
    _login(ctl, "--name", "first")
    username = ctl.server.make_user(__import__("styrmin").Role.READ_ONLY)
    second = ctl(
        "login", ctl.server.url, "-u", username, "--password-stdin", "--name", "reader",
        input="a-long-password-for-sdk-tests\n", auth=False,
    )  # fmt: skip
    assert second.exit_code == 0, second.output
    assert ctl("config", "current-context", auth=False).stdout.strip() == "reader"
    assert ctl("whoami", auth=False).stdout.startswith(f"{username} (Read-only)")
    contexts = json.loads(ctl("config", "get-contexts", "-o", "json", auth=False).stdout)
    assert [(c["name"], c["current"], c["logged_in"]) for c in contexts] == [
        ("first", False, True),
        ("reader", True, True),
    ]
    assert "token" not in contexts[0]  # tokens are never printed
    table = ctl("config", "get-contexts", auth=False).stdout
    assert [line.split()[:2] for line in table.splitlines()[1:]] == [
        ["first", ctl.server.url],
        ["*", "reader"],
    ]
    assert "expires 20" in table and " UTC" in table
    assert ctl("--context", "first", "whoami", auth=False).stdout.startswith("admin (Admin)")
    switched = ctl("config", "use-context", "first", auth=False)
    assert switched.exit_code == 0 and 'Switched to context "first"' in switched.stdout
    assert ctl("whoami", auth=False).stdout.startswith("admin")
    assert ctl("config", "use-context", "nope", auth=False).exit_code == 2
    assert ctl("--context", "nope", "whoami", auth=False).exit_code == 2
    assert ctl("config", "delete-context", "reader", auth=False).exit_code == 0
    assert [
        c["name"] for c in json.loads(ctl("config", "get-contexts", "-o", "json", auth=False).stdout)
    ] == ["first"]


def test_logout_revokes_the_token_and_forgets_it(ctl: Ctl) -> None:
    _login(ctl)
    token = yaml.safe_load(ctl.config.read_text())["contexts"][0]["token"]
    result = ctl("logout", auth=False)
    assert result.exit_code == 0, result.output
    assert f"Logged out of {ctl.server.url}: its token is revoked." in result.stdout
    with Client(ctl.server.url, token) as client:
        try:
            client.whoami()
            raise AssertionError("the token still works")
        except AuthenticationError:
            pass
    context = yaml.safe_load(ctl.config.read_text())["contexts"][0]
    assert "token" not in context and context["server"] == ctl.server.url
    assert stat.S_IMODE(ctl.config.stat().st_mode) == 0o600
    again = ctl("whoami", auth=False)
    assert again.exit_code == 1 and "Log in again with: styrminctl login" in again.stderr
    assert ctl("logout", auth=False).exit_code == 2  # nothing to log out of


def test_a_token_lifetime_out_of_range_or_unreadable_names_expires_in(ctl: Ctl) -> None:
    for given, said in (("0", "is out of range"), ("99999d", "is out of range"), ("5x", "is not a duration")):
        refused = ctl("login", ctl.server.url, "-u", "admin", "--password-stdin", "--expires-in", given,
                      input=ADMIN_PASSWORD + "\n", auth=False)  # fmt: skip
        assert refused.exit_code == 2, refused.output
        assert f'--expires-in "{given}" {said}' in refused.stderr
    assert not ctl.config.exists()


def test_login_after_logout_fills_the_current_context_again(ctl: Ctl) -> None:
    _login(ctl, "--name", "work")
    assert ctl("logout", auth=False).exit_code == 0

    again = ctl("login", "-u", "admin", "--password-stdin", input=ADMIN_PASSWORD + "\n", auth=False)

    assert again.exit_code == 0, again.output
    assert 'Context "work" is current' in again.stdout
    contexts = json.loads(ctl("config", "get-contexts", "-o", "json", auth=False).stdout)
    assert [(c["name"], c["current"], c["logged_in"]) for c in contexts] == [("work", True, True)]


def test_the_environment_and_flags_override_the_config_file(ctl: Ctl) -> None:
    _login(ctl)
    other_user = ctl.server.make_user(__import__("styrmin").Role.READ_WRITE)
    token = ctl.server.token_for(other_user)
    by_env = ctl("whoami", env={"STYRMIN_TOKEN": token}, auth=False)
    assert by_env.stdout.startswith(other_user)
    by_flag = ctl("--token", token, "whoami", auth=False)
    assert by_flag.stdout.startswith(other_user)
    # A context's token is never sent to another server:
    elsewhere = ctl("--server", "http://127.0.0.1:9/", "--request-timeout", "1", "whoami", auth=False)
    assert elsewhere.exit_code == 2 and "cannot be reached" in elsewhere.stderr


def test_without_any_server_the_command_says_how_to_name_one(ctl: Ctl) -> None:
    result = ctl("deployments", "list", auth=False)
    assert result.exit_code == 2
    assert "No Styrmin server: log in with `styrminctl login URL`" in result.stderr


def test_a_config_file_readable_by_others_gets_a_warning(ctl: Ctl) -> None:
    _login(ctl)
    ctl.config.chmod(0o644)
    result = ctl("whoami", auth=False)
    assert result.exit_code == 0
    assert "can be read by other users" in result.stderr and "chmod 600" in result.stderr
    ctl("config", "use-context", ctl.server.url.removeprefix("http://"), auth=False)
    assert stat.S_IMODE(ctl.config.stat().st_mode) == 0o600  # written back private


def test_a_broken_config_file_is_a_usage_error(ctl: Ctl) -> None:
    ctl.config.parent.mkdir(parents=True)
    ctl.config.write_text("contexts: [ {name: x")
    result = ctl("whoami", auth=False)
    assert result.exit_code == 2
    assert "is not valid YAML" in result.stderr
