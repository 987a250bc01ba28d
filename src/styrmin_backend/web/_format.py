"""How the UI writes times, durations, statuses and configuration for people to read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote as _quote

import yaml

from styrmin_backend.clock import as_utc, utcnow

# Every status is told by a word and a symbol as well as a colour. A task's "running" is work in
# progress; a deployment's "running" is the healthy state.
_ICONS = {
    "task": {"pending": "○", "running": "◐", "succeeded": "✓", "failed": "✗", "cancelled": "⊘"},
    "deployment": {
        "pending": "○",
        "deploying": "◐",
        "running": "✓",
        "stopped": "■",
        "failed": "✗",
        "deleting": "◐",
        "deleted": "■",
    },
    "component": {"ready": "✓", "not-ready": "◐", "stopped": "■", "unreported": "○"},
    "agent": {"connected": "✓", "not-connected": "✗", "never-connected": "○", "revoked": "■"},
}


def now() -> datetime:
    """The current time (UTC)."""
    return utcnow()


def when(moment: datetime | None) -> str:
    """A timestamp as ``2026-11-29 18:55:10 UTC``; a dash when there is none."""
    if moment is None:
        return "—"
    return as_utc(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | timedelta | None) -> str:
    """A duration as ``850 ms``, ``12.4 s``, ``3 min 05 s`` or ``2 h 01 min``."""
    if seconds is None:
        return "—"
    total = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
    total = max(total, 0.0)
    if total < 1:
        return f"{round(total * 1000)} ms"
    if total < 60:
        return f"{total:.1f} s"
    minutes, secs = divmod(round(total), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def age(moment: datetime | None) -> str:
    """How long ago ``moment`` was, roughly: ``5 min ago``."""
    if moment is None:
        return "—"
    seconds = (utcnow() - as_utc(moment)).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} d ago"


def status_icon(status: str, kind: str = "task") -> str:
    """The symbol shown beside the status word of a task (or step), a deployment or a component."""
    return _ICONS.get(kind, {}).get(str(status), "•")


def status_label(status: str) -> str:
    """A status as words starting with a capital: ``Succeeded``, ``Not ready``."""
    return str(status).replace("-", " ").capitalize()


def as_yaml(data: Any) -> str:
    """``data`` as block YAML, keys in their order; empty mappings as ``{}``."""
    if not data:
        return "{}"
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True).rstrip()


def quote(path: str) -> str:
    """``path`` quoted for a query string."""
    return _quote(path, safe="/")
