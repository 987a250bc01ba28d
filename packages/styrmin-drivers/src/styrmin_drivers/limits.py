"""How much work reading one driver may cause: one push, one validation, one spec.

The server checks drivers that any signed-in user may upload, and ``styrminctl`` packs and checks
them on the operator's machine with the same code, so each bound is defined here once.
"""

from __future__ import annotations

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
