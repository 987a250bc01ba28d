"""Small helpers on object metadata: timestamps, uids, generated names, owner references."""

from __future__ import annotations

import random
import time
import uuid
from datetime import datetime
from typing import Any

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now() -> str:
    """The current time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def new_uid() -> str:
    return str(uuid.uuid4())


def random_suffix(length: int = 5) -> str:
    return "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(length))  # noqa: S311


def safe_hash(text: str, length: int = 10) -> str:
    """A stable short hash in the alphabet Kubernetes uses for pod-template-hash and revisions."""
    import hashlib

    digest = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    chars = []
    for _ in range(length):
        digest, index = divmod(digest, len(_SUFFIX_ALPHABET))
        chars.append(_SUFFIX_ALPHABET[index])
    return "".join(chars)


def owner_reference(owner: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def age(timestamp: str | None) -> str:
    """A short human age like kubectl prints: 5s, 3m2s, 4h, 2d."""
    started = parse_time(timestamp)
    if started is None:
        return "<unknown>"
    return short_duration(max(0.0, time.time() - started))


def short_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def set_condition(
    conditions: list[dict[str, Any]],
    ctype: str,
    status: str,
    reason: str = "",
    message: str = "",
    probe_time: bool = False,
) -> list[dict[str, Any]]:
    """Set a condition, keeping lastTransitionTime when the status does not change."""
    timestamp = now()
    result = []
    found = False
    for condition in conditions:
        if condition.get("type") == ctype:
            found = True
            changed = condition.get("status") != status
            updated = dict(condition, status=status, reason=reason, message=message)
            if changed:
                updated["lastTransitionTime"] = timestamp
            moved = changed or condition.get("reason") != reason or condition.get("message") != message
            if (probe_time or "lastUpdateTime" in condition) and moved:
                updated["lastUpdateTime"] = timestamp
            if not message:
                updated.pop("message", None)
            result.append(updated)
        else:
            result.append(condition)
    if not found:
        condition = {"type": ctype, "status": status, "lastTransitionTime": timestamp, "reason": reason}
        if probe_time:
            condition["lastUpdateTime"] = timestamp
        if message:
            condition["message"] = message
        result.append(condition)
    return result
