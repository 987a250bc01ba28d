"""Processes that end with the process that started them (imports nothing: the fork server uses it)."""

from __future__ import annotations

import ctypes
import os
import signal


def die_with(parent_pid: int) -> None:
    """Ask Linux to kill this process when its parent dies, so that nothing it runs outlives the
    process that started it (an agent without its server, an action without its agent)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's process group kill still applies
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
