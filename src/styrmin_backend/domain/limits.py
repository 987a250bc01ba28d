"""Limits of the product, defined once and imported everywhere (tests included)."""

from __future__ import annotations

OUTPUT_TAIL_MAX_LINES = 200
"""A failed Job's output kept on its hook step: at most this many last lines..."""

OUTPUT_TAIL_MAX_BYTES = 64 * 1024
"""...and at most this many bytes."""

REDACTED = "<redacted>"
"""What replaces a token or secret in an error line shown to users."""

# How much work one push or validation of a driver may cause. The server checks drivers that any
# signed-in user may upload, so each expensive step is bounded in time and memory.

DRIVER_ARCHIVE_MAX_BYTES = 32 * 1024 * 1024
"""The largest driver archive accepted, compressed (the request body)."""

DRIVER_CONTENT_MAX_BYTES = 128 * 1024 * 1024
"""The most bytes a driver's files may hold together, uncompressed; unpacking stops past it."""

DRIVER_MAX_ENTRIES = 5000
"""The most entries a driver may hold: files, folders and left-out files (caches) all count."""

DRIVER_PATH_MAX_LENGTH = 240
"""The longest path of a file inside a driver."""

SPEC_MAX_BYTES = 1024 * 1024
"""The largest ``driver.styrmin.yml``."""

YAML_MAX_NODES = 200_000
"""The most values one YAML document may hold, each alias counted as the values it repeats."""

YAML_MAX_DEPTH = 100
"""The deepest nesting of lists and mappings in a YAML document."""

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
