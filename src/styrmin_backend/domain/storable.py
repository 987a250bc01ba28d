"""What of a document a user sends (a request body, a deployment's Helm values) Styrmin can keep.

No database stores NUL in text (PostgreSQL refuses it), no UTF-8 text holds a lone surrogate, no
JSON document (nor Helm, which reads the values as JSON) holds NaN or Infinity, and a document
nested without end costs every reader of it. Each is refused with the path of the part at fault,
before anything is stored, rather than failing later in the database, the agent or Helm.
"""

from __future__ import annotations

import math

from styrmin_backend.domain.limits import YAML_MAX_DEPTH

NUL = "contains a NUL character (\\x00); remove it."


def unstorable_part(document: object, path: str = "") -> tuple[str, str] | None:
    """``(path, problem)`` of the first part of ``document`` (dicts, lists, text, numbers, as JSON or
    YAML gives them) that Styrmin cannot keep, else None. ``path`` names ``document`` itself ("" for a
    whole body); a part's path adds ``.key`` or ``.index``, a key at fault ``.'key'``.

    It walks without recursion, so any depth a parser accepts is judged, not a stack overflow.

    >>> unstorable_part({"values": {"replicas": float("nan")}})
    ('values.replicas', 'is not a finite number (NaN or Infinity); write a number or a quoted string.')
    >>> unstorable_part({"name": "web"}) is None
    True
    """
    pending: list[tuple[object, str, int]] = [(document, path, 0)]
    while pending:
        part, where, depth = pending.pop()
        if isinstance(part, str):
            problem = _text_problem(part)
            if problem is not None:
                return where, problem
        elif isinstance(part, float) and not math.isfinite(part):
            return where, "is not a finite number (NaN or Infinity); write a number or a quoted string."
        elif isinstance(part, dict | list):
            if depth >= YAML_MAX_DEPTH:
                return where, f"nests lists and mappings more than {YAML_MAX_DEPTH} deep; flatten it."
            children = []
            for key, child in part.items() if isinstance(part, dict) else enumerate(part):
                if isinstance(key, str) and (problem := _text_problem(key)) is not None:
                    return f"{where}.{key!r}".lstrip("."), problem
                children.append((child, f"{where}.{key}" if where else str(key), depth + 1))
            pending.extend(reversed(children))  # the first child is judged first
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return NUL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (it holds a lone surrogate such as \\ud800); send it as UTF-8."
    return None
