"""Limits of the product, defined once and imported everywhere (tests included)."""

from __future__ import annotations

OUTPUT_TAIL_MAX_LINES = 200
"""A failed Job's output kept on its hook step: at most this many last lines..."""

OUTPUT_TAIL_MAX_BYTES = 64 * 1024
"""...and at most this many bytes."""

REDACTED = "<redacted>"
"""What replaces a token or secret in an error line shown to users."""
