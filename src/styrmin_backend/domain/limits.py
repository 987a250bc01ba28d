"""Limits of the product, defined once and imported everywhere (tests included)."""

from __future__ import annotations

# How much work one push or validation of a driver may cause is bounded by the driver library,
# which the client shares; its limits are re-exported here with the rest.
from styrmin_drivers.limits import (
    DRIVER_ARCHIVE_MAX_BYTES,
    DRIVER_CONTENT_MAX_BYTES,
    DRIVER_MAX_ENTRIES,
    DRIVER_PATH_MAX_LENGTH,
    SPEC_MAX_BYTES,
    YAML_MAX_DEPTH,
    YAML_MAX_NODES,
)

__all__ = [
    "CONCURRENT_DRIVER_CHECKS",
    "DRIVER_ARCHIVE_MAX_BYTES",
    "DRIVER_CHECK_RETRY_AFTER_SECONDS",
    "DRIVER_CONTENT_MAX_BYTES",
    "DRIVER_MAX_ENTRIES",
    "DRIVER_PATH_MAX_LENGTH",
    "OUTPUT_TAIL_MAX_BYTES",
    "OUTPUT_TAIL_MAX_LINES",
    "REDACTED",
    "RENDER_MAX_MEMORY_BYTES",
    "RENDER_MAX_NODES",
    "RENDER_MAX_OUTPUT_BYTES",
    "RENDER_TIMEOUT_SECONDS",
    "REQUEST_BODY_MAX_BYTES",
    "SPEC_MAX_BYTES",
    "YAML_MAX_DEPTH",
    "YAML_MAX_NODES",
]

REQUEST_BODY_MAX_BYTES = 8 * 1024 * 1024
"""The largest body a request may send, but a driver's upload (``DRIVER_ARCHIVE_MAX_BYTES``): a
configuration's Helm values are far smaller (Helm keeps a release's in one Kubernetes object of at most
1 MiB), and the server reads a body whole before it knows who sent it."""

OUTPUT_TAIL_MAX_LINES = 200
"""A failed Job's output kept on its hook step: at most this many last lines..."""

OUTPUT_TAIL_MAX_BYTES = 64 * 1024
"""...and at most this many bytes."""

REDACTED = "<redacted>"
"""What replaces a token or secret in an error line shown to users."""

RENDER_TIMEOUT_SECONDS = 30.0
"""How long Helm may take to render a driver's chart on the server."""

RENDER_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""The most text a driver's chart may render (every template together)."""

RENDER_MAX_NODES = 2_000_000
"""The most values a chart's rendered manifests may hold together (aliases counted as they repeat)."""

RENDER_MAX_MEMORY_BYTES = 512 * 1024 * 1024
"""The memory (data segment) of the process that renders a chart on the server: Helm and the YAML parse."""

CONCURRENT_DRIVER_CHECKS = 2
"""How many pushes and validations of drivers one server process runs at once; more get 429."""

DRIVER_CHECK_RETRY_AFTER_SECONDS = 5
"""The ``Retry-After`` of that 429: about how long one check takes on a loaded machine."""
