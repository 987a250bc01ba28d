"""Secrets in step errors and output tails are replaced by <redacted>."""

from __future__ import annotations

import time

import pytest

from styrmin_backend.domain.limits import REDACTED
from styrmin_backend.domain.redaction import redact

TOKEN = "sty_act_0123456789abcdef0123456789abcdef"


def test_the_actions_token_is_redacted_wherever_it_appears() -> None:
    text = f"GET /api/tasks failed for {TOKEN}; retried with {TOKEN}"

    assert redact(text, [TOKEN]) == f"GET /api/tasks failed for {REDACTED}; retried with {REDACTED}"


def test_empty_extra_secrets_are_ignored() -> None:
    assert redact("nothing secret here", ["", "  "]) == "nothing secret here"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "postgresql://shop:s3cr3t!@db:5432/shop failed",
            f"postgresql://shop:{REDACTED}@db:5432/shop failed",
        ),
        ("Authorization: Bearer abcdefghijklmnop", f"Authorization: Bearer {REDACTED}"),
        ("password=hunter22 user=bob", f"password={REDACTED} user=bob"),
        ('{"api_key": "k-123456", "name": "shop"}', f'{{"api_key": "{REDACTED}", "name": "shop"}}'),
        ("DB_PASSWORD='p@ss w0rd' next", f"DB_PASSWORD='{REDACTED}' next"),
        ("token: abc123 expired", f"token: {REDACTED} expired"),
        ("GET /x?access_key=AbC123&page=2", f"GET /x?access_key={REDACTED}&page=2"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
            f"jwt {REDACTED} ok",
        ),
        (
            "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nafter",
            f"key:\n{REDACTED}\nafter",
        ),
        ("-----BEGIN PRIVATE KEY-----\nMIIEv (output cut here", REDACTED),
        ("id AKIAIOSFODNN7EXAMPLE used", f"id {REDACTED} used"),
        ("gcp key AIzaSyA-1234567890abcdefghijklmnopqrstu in use", f"gcp key {REDACTED} in use"),
        ("pushed with ghp_abcdefghijklmnopqrstuvwxyz0123456789", f"pushed with {REDACTED}"),
        ("slack xoxb-123456789012-abcdefghijkl posted", f"slack {REDACTED} posted"),
        ("charged with sk_live_abcdefghijklmnopqrstuvwx", f"charged with {REDACTED}"),
    ],
)
def test_common_secret_forms_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        'Job shop-migrate-7f3c of deployment "shop" failed with exit code 3',
        "image registry.local:5000/shop/server:1.1.0@sha256:" + "a" * 64,
        "Flow run 0b7c9a0e-2f3d-4c1e-9a8b-7c6d5e4f3a2b crashed",
        "connecting to 10.0.0.12:5432 and 93.184.216.34",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_64_kib_output_tail_is_redacted_throughout() -> None:
    tail = ("INFO migrating users: batch 1200 of 5000 done, 12.5 MB/s token=abc\n" * 1000)[:65536]

    redacted = redact(tail, [TOKEN])

    assert "token=abc" not in redacted
    assert redacted.count("INFO migrating users") == tail.count("INFO migrating users")


def test_pathological_input_does_not_backtrack_catastrophically() -> None:
    # Not a speed figure (about 0.3 s here): a pattern that backtracks on this input would take
    # minutes, so the generous bound only catches that, whatever else the machine is doing.
    started = time.perf_counter()

    redact("a-" * 32768 + "token" * 5000 + "eyJ" * 10000)

    assert time.perf_counter() - started < 30.0
