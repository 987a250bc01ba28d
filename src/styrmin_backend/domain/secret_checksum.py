"""The digest of a component's secret env vars that rolls its workload out when one of them changes.

A component container reads its secret env vars from the deployment's env Secret, so its pod template
stays the same when only a value changes: a digest of the values on the pod template makes the new
value roll the workload out. Whoever may read the workload may read that digest, so it is keyed
(HMAC-SHA256): without the key, a digest tells nothing of the values and cannot be used to test
guesses of them. The key is kept beside the values, in the env Secret itself (its
:data:`~styrmin_backend.drivers.workloads.CHECKSUM_KEY_ENTRY`): whoever may read it may read the
values anyway, and the same key keeps giving the same digest for the same values.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

CHECKSUM_KEY_BYTES = 32
"""The length of a checksum key: as long as SHA-256's output, as HMAC's key should be."""


def secret_env_checksum(variables: Mapping[str, str], key: bytes) -> str:
    """16 hex digits of the HMAC-SHA256, under ``key``, of a component's secret env vars (names and
    values): the same for the same values and key, another one when a value changes.

    Raises:
        ValueError: if ``key`` is shorter than :data:`CHECKSUM_KEY_BYTES`.
    """
    if len(key) < CHECKSUM_KEY_BYTES:
        raise ValueError(f"a secret env checksum key has at least {CHECKSUM_KEY_BYTES} bytes")
    text = json.dumps(sorted(variables.items()))
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:16]


def encode_checksum_key(key: bytes) -> str:
    """``key`` as the env Secret holds it (hex)."""
    return key.hex()


def decode_checksum_key(stored: str | None) -> bytes | None:
    """The checksum key an env Secret holds, or None when it holds none (or one that is not fit: a
    new key then replaces it, and the workloads roll out once)."""
    if stored is None:
        return None
    try:
        key = bytes.fromhex(stored)
    except ValueError:
        return None
    return key if len(key) >= CHECKSUM_KEY_BYTES else None
