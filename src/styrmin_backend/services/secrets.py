"""Password hashing (argon2) and API tokens (random, stored only as a SHA-256 hash)."""

from __future__ import annotations

import functools
import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

TOKEN_PREFIX = "sty_"  # noqa: S105 - a marker, not a secret
_hasher = PasswordHasher()


@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against when the user does not exist, so that a login takes as long either way.

    Made on first use, not on import: every process that imports the services (each CLI call, the
    agent) would otherwise pay an argon2 hash (0.3 s, more on a busy machine) at start.
    """
    return _hasher.hash("styrmin-no-such-user")


def hash_password(password: str) -> str:
    """The argon2 hash of ``password``."""
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Whether ``password`` matches ``password_hash`` (always False for no hash, in constant effort)."""
    try:
        return _hasher.verify(password_hash or _dummy_hash(), password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False


def new_token() -> str:
    """A new random API token, shown to its owner once."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """How a token is stored: tokens carry 256 random bits, so a fast hash is as safe as a slow one."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_password() -> str:
    """A new random password for a generated admin or a reset."""
    return secrets.token_urlsafe(18)
