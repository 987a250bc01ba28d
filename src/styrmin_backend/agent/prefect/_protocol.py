"""Messages between the agent, the fork server and an action's process: one JSON object each.

On the control socket (a ``SOCK_SEQPACKET`` pair, one message per packet): the fork server sends
``ready`` once Prefect is imported; the agent sends ``fork`` (an ``id``) with the action's own
socket attached; the fork server answers ``forked`` (that ``id``, the child's ``pid``), and
``exited`` (the ``pid``, its ``returncode``) once the child has ended.

On the action's socket (a stream, one JSON line each): the agent writes the job, then shuts its
writing half. The job's ``result_storage``, when not null, is a ``KnownResultStorage``. The child writes its messages there (not on stdout, which the action may print to), in
this order: ``flow_run`` once the action's flow run exists on the Prefect server (its id, and its flow's name and
id, which the agent passes to later jobs as ``flow_ids``); any number of ``log`` (each
record the flow run logs, for the agent to send to the Prefect server); ``end`` with the outcome.
A process that ends without ``end`` has crashed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

READY: Final = "ready"
FORK: Final = "fork"
FORKED: Final = "forked"
EXITED: Final = "exited"
FLOW_RUN: Final = "flow_run"
LOG: Final = "log"
END: Final = "end"

MESSAGE_LIMIT: Final = 8 * 1024 * 1024
"""Longest message line the agent reads; a Prefect log record is at most 1 MB by default."""


def encode(kind: str, **fields: Any) -> bytes:
    """One message as a JSON line."""
    return json.dumps({"kind": kind, **fields}, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """The message of one JSON line."""
    message: dict[str, Any] = json.loads(line)
    return message


@dataclass(frozen=True)
class KnownResultStorage:
    """The Prefect server's default result storage as the agent read it, passed in a job: the id of
    its block, or ``None`` for none (actions then keep results in Prefect's local storage path)."""

    block_id: str | None

    def encode(self) -> dict[str, str | None]:
        return {"block_id": self.block_id}

    @classmethod
    def decode(cls, field: Any) -> KnownResultStorage | None:
        """The job's ``result_storage`` field; ``None`` when the job brings no answer."""
        if not isinstance(field, dict):
            return None
        block_id = field.get("block_id")
        return cls(block_id=block_id if isinstance(block_id, str) else None)
