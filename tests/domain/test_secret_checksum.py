"""The keyed checksum of a component's secret env vars, and the key as its env Secret holds it."""

from __future__ import annotations

import hashlib
import json

import pytest

from styrmin_backend.domain.secret_checksum import (
    CHECKSUM_KEY_BYTES,
    decode_checksum_key,
    encode_checksum_key,
    secret_env_checksum,
)

KEY = bytes(range(CHECKSUM_KEY_BYTES))


def test_the_checksum_depends_on_the_key_and_the_values_and_is_not_their_plain_digest() -> None:
    variables = {"DB_PASSWORD": "hunter2"}
    checksum = secret_env_checksum(variables, KEY)

    assert len(checksum) == 16
    assert secret_env_checksum(dict(variables), KEY) == checksum
    assert secret_env_checksum(variables, bytes(CHECKSUM_KEY_BYTES)) != checksum
    assert secret_env_checksum({"DB_PASSWORD": "hunter3"}, KEY) != checksum
    assert checksum != hashlib.sha256(json.dumps(sorted(variables.items())).encode()).hexdigest()[:16]


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        secret_env_checksum({"DB_PASSWORD": "hunter2"}, b"short")


def test_a_key_reads_back_as_held_and_an_unfit_one_reads_as_none() -> None:
    assert decode_checksum_key(encode_checksum_key(KEY)) == KEY
    assert decode_checksum_key(None) is None
    assert decode_checksum_key("not hex") is None
    assert decode_checksum_key("ab" * (CHECKSUM_KEY_BYTES - 1)) is None
