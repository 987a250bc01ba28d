"""The one rule for what is secret, and how a secret is shown and kept."""

from __future__ import annotations

from styrmin_backend.domain.login_throttle import MAX_BLOCK, block_for
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.secrets import SECRET_SET, conceal, is_secret_name, keep_concealed, secret_values


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
