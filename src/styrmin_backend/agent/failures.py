"""How a step of a reconciliation fails, as users read it."""

from __future__ import annotations


class StepFailed(Exception):
    """A step failed; the message is its error, as users read it."""
