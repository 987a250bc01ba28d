"""Waiting for a task to end, shared by the sync and async clients."""

from __future__ import annotations

import time

from styrmin.errors import TaskFailedError, WaitTimeoutError
from styrmin.models import Task, TaskStatus

LONG_POLL_SECONDS = 10.0
"""How long one read of a waited-for task may wait on the server for its end."""


class WaitState:
    """Tracks one wait: what was last reported and when the wait gives up."""

    def __init__(self, task_id: int, interval: float, timeout: float | None) -> None:
        self.task_id = task_id
        self.interval = max(interval, 0.05)
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self._last: Task | None = None

    def long_poll_seconds(self, read_timeout: float | None) -> float:
        """How long the next read may wait on the server for the task's end (within the deadline
        and, with room to spare, the client's read timeout)."""
        seconds = LONG_POLL_SECONDS
        if read_timeout is not None:
            seconds = min(seconds, read_timeout / 2)
        if self.deadline is not None:
            seconds = min(seconds, self.deadline - time.monotonic())
        return max(seconds, 0.0)

    def changed(self, task: Task) -> bool:
        """Whether ``task`` differs from what was last reported (always True the first time)."""
        if task == self._last:
            return False
        self._last = task
        return True

    def next_pause(self, task: Task, raise_on_failure: bool) -> float | None:
        """Seconds to sleep before the next poll; None when the task has ended.

        Raises:
            TaskFailedError: the task failed and ``raise_on_failure`` is True.
            WaitTimeoutError: the deadline passed.
        """
        if task.ended:
            if raise_on_failure and task.status == TaskStatus.FAILED:
                raise TaskFailedError(
                    f"Task {task.id} ({task.type.value} of {task.deployment}) failed: {task.error or 'no error given'}",
                    task=task,
                )
            return None
        if self.deadline is None:
            return self.interval
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeoutError(
                f"Task {task.id} has not ended after {self.timeout:g} seconds; it is {task.status.value}.",
                task=task,
            )
        return min(self.interval, left)
