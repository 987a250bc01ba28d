"""Test a driver the way Styrmin runs it: a whole Styrmin in the test process.

``StyrminStack.start(work_dir, catalogs)`` runs the server (SQLite, loopback), the embedded local
cluster (pods as local processes, images from the catalogs), a Prefect server and the agent. A test
pushes the driver, creates and upgrades a deployment through ``stack.client`` (the Python SDK), and
asserts on the task, its steps (``hook_step``), errors, stored output and the cluster's objects
(``stack.kube``). With pytest, ``pytest_plugins = ["styrmin_backend.testing.pytest_plugin"]`` gives a
session fixture ``styrmin_stack``. See docs/testing-drivers.md.
"""

from styrmin_backend.testing._stack import StyrminStack, describe, hook_step

__all__ = ["StyrminStack", "describe", "hook_step"]
