"""The names on an action's Job that execute_commands and every cluster backend agree on."""

from __future__ import annotations

from styrmin_backend.drivers.workloads import DEPLOYMENT_LABEL as DEPLOYMENT_LABEL

JOB_CONTAINER = "command"
"""The name of the one container of an action's Job."""

ACTION_JOB_LABEL = "styrmin.io/action-job"
"""Set to ``"true"`` on every Job that execute_commands starts, and on its pods."""
TASK_LABEL = "styrmin.io/task"
HOOK_STEP_LABEL = "styrmin.io/hook-step"
JOB_NAME_LABEL = "styrmin.io/job"
OUTPUT_READ_ANNOTATION = "styrmin.io/output-read"
"""Set once the action that started a Job has read its result: the Job may then be deleted."""
