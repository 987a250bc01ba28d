"""The errors the primitives raise: their message is what the hook step and the task show."""

from __future__ import annotations


class ActionError(Exception):
    """A primitive failed; the message says what failed, why, and what to do."""


class CommandFailed(ActionError):
    """The Job that ``execute_commands`` started failed; its output's end is stored on the hook step.

    Attributes:
        job_name: the Job, left in the namespace until the next action's Job replaces it.
        exit_code: the command's exit code; None when it never ran (image missing, deadline passed).
        output_tail: the kept end of its output, secrets redacted.
        output_truncated: whether earlier output was cut.
    """

    def __init__(
        self,
        message: str,
        *,
        job_name: str = "",
        exit_code: int | None = None,
        output_tail: str = "",
        output_truncated: bool = False,
    ) -> None:
        # Defaults let pickle rebuild it from its message and then its attributes (Prefect may pickle it).
        super().__init__(message)
        self.job_name = job_name
        self.exit_code = exit_code
        self.output_tail = output_tail
        self.output_truncated = output_truncated


def action_error_text(error: BaseException) -> str:
    """An action's exception as its hook step shows it, after "Action NAME failed: ".

    A primitive's :class:`ActionError` already says what failed and what to do: its message, as it
    is. Any other exception is the action's own, and its message alone may not say what it is (a
    ``KeyError('server')`` reads ``'server'``): its type's name comes first.

    >>> action_error_text(ActionError("Job shop-migrate-7f3c failed."))
    'Job shop-migrate-7f3c failed.'
    >>> action_error_text(KeyError("server"))
    "KeyError: 'server'"
    >>> action_error_text(RuntimeError())
    'RuntimeError'
    """
    message = str(error)
    if isinstance(error, ActionError):
        return message or type(error).__name__
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
