"""The one rule for what is secret, and how a secret is shown and kept."""

from __future__ import annotations

from typing import Any

import pytest

from styrmin_backend.domain.login_throttle import MAX_BLOCK, block_for
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.secrets import (
    ENCRYPTED,
    SECRET_SET,
    conceal,
    conceal_configuration,
    decrypt_configuration,
    encrypt_configuration,
    has_plain_secrets,
    is_secret_name,
    keep_concealed,
    secret_values,
)


def test_one_rule_names_secrets_in_configuration_and_in_text() -> None:
    for name in ("DB_PASSWORD", "apiKey", "SENTRY_DSN", "github_token", "connection_string", "client-secret"):
        assert is_secret_name(name)
        assert "value-123456" not in redact(f"{name}=value-123456")
    for name in ("LOG_LEVEL", "replicas", "image", "host"):
        assert not is_secret_name(name)


def test_conceal_shows_set_or_unset_and_keeps_the_rest() -> None:
    data = {"auth": {"password": "pw-1", "user": "shop"}, "token": "", "url": "https://u:p4ss@host/x"}
    assert conceal(data) == {
        "auth": {"password": SECRET_SET, "user": "shop"},
        "token": "",
        "url": f"https://u:{SECRET_SET}@host/x",
    }


def test_values_sent_back_concealed_keep_the_stored_secret_and_new_ones_win() -> None:
    stored = {"password": "pw-1", "url": "https://u:p4ss@host/x", "n": 1}
    assert keep_concealed(conceal(stored), stored) == stored
    assert keep_concealed({**conceal(stored), "password": "pw-2"}, stored)["password"] == "pw-2"
    # A secret the user never had cannot be taken by sending the marker under another key.
    assert keep_concealed({"other": SECRET_SET}, stored) == {"other": SECRET_SET}


def test_secret_values_lists_what_to_redact() -> None:
    values = secret_values(
        {"values": {"db": {"password": "pw-12345"}}, "env": {"c": {"API_KEY": "key-6789"}}}
    )
    assert {"pw-12345", "key-6789"} <= values


def test_login_backoff_doubles_and_is_capped() -> None:
    assert block_for(5, 5) is None
    assert [block_for(n, 5).total_seconds() for n in (6, 7, 8)] == [1, 2, 4]  # type: ignore[union-attr]
    assert block_for(1000, 5) == MAX_BLOCK


class _Reversing:
    """A stand-in cipher whose tokens are easy to read in a test."""

    def encrypt(self, plain: str) -> str:
        return plain[::-1]

    def decrypt(self, token: str) -> str:
        return token[::-1]


def test_encryption_seals_exactly_the_secret_values_and_opens_them_back() -> None:
    configuration = {
        "values": {
            "db": {"password": "pw-1", "url": "postgres://u:pw-2@db/x", "host": "db"},
            "token": {"a": 1},
        },
        "images": {"server": "shop:1"},
        "env": {"token-service": {"API_KEY": "k-3", "LEVEL": "debug", "EMPTY_TOKEN": ""}},
    }
    cipher = _Reversing()
    sealed = encrypt_configuration(configuration, cipher)
    assert sealed["values"]["db"]["password"] == {ENCRYPTED: '"1-wp"'}
    assert set(sealed["values"]["db"]["url"]) == {ENCRYPTED}  # a URL with a password: sealed whole
    assert sealed["values"]["db"]["host"] == "db" and sealed["images"] == configuration["images"]
    assert set(sealed["values"]["token"]) == {ENCRYPTED}  # a mapping under a secret key: sealed whole
    # A component's name is no secret key: only its secret vars are sealed.
    assert (
        sealed["env"]["token-service"]["LEVEL"] == "debug"
        and sealed["env"]["token-service"]["EMPTY_TOKEN"] == ""
    )
    assert encrypt_configuration(sealed, cipher) == sealed  # sealing twice changes nothing
    assert decrypt_configuration(sealed, cipher) == configuration
    assert decrypt_configuration(configuration, cipher) == configuration  # plain values read as they are
    assert has_plain_secrets(configuration) and not has_plain_secrets(sealed)


def test_what_is_concealed_is_exactly_what_is_sealed() -> None:
    configuration = {
        "values": {"db": {"password": "pw", "url": "https://u:pw@h/x", "port": 5432}, "apiKey": ["a"]},
        "env": {"web": {"DATABASE_URL": "postgres://u:pw@db/x", "SECRET_KEY": "s", "LEVEL": "info"}},
    }
    concealed = conceal_configuration(configuration)
    sealed = encrypt_configuration(configuration, _Reversing())

    def changed(before: Any, after: Any, path: str = "") -> set[str]:
        if isinstance(before, dict) and isinstance(after, dict) and set(before) == set(after):
            return {p for k in before for p in changed(before[k], after[k], f"{path}/{k}")}
        return {path} if before != after else set()

    assert (
        changed(configuration, concealed)
        == changed(configuration, sealed)
        == {
            "/values/db/password",
            "/values/db/url",
            "/values/apiKey",
            "/env/web/DATABASE_URL",
            "/env/web/SECRET_KEY",
        }
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        # Each of these was shown in clear to Read-only users, and stored unencrypted, before.
        ("redis://:REDISPW123@redis:6379/0", f"redis://:{SECRET_SET}@redis:6379/0"),  # Redis: no user
        ("redis://default:ab/cd+EF==@redis:6379", f"redis://default:{SECRET_SET}@redis:6379"),  # base64
        ("amqp://user:P@SSW0RD@host/vhost", f"amqp://user:{SECRET_SET}@host/vhost"),  # most of it showed
        (
            "jdbc:postgresql://db/shop?user=shop&password=pw-9&ssl=true",
            f"jdbc:postgresql://db/shop?user=shop&password={SECRET_SET}&ssl=true",
        ),
        ("https://hooks.example.com/x?api_key=k-1", f"https://hooks.example.com/x?api_key={SECRET_SET}"),
    ],
)
def test_the_password_of_a_url_is_secret_in_every_form_users_write_it(value: str, shown: str) -> None:
    assert conceal(value, "REDIS_URL") == shown
    assert conceal({"cache": value}) == {"cache": shown}


@pytest.mark.parametrize(
    "value", ["https://example.com:8443/shop", "git@github.com:org/repo.git", "http://host/a?page=2&user=me"]
)
def test_a_url_without_credentials_stays_as_it_is(value: str) -> None:
    assert conceal(value, "URL") == value
