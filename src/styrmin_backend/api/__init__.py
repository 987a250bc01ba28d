"""The REST API under /api/v1."""

from styrmin_backend.api.app import create_app

__all__ = ["create_app"]
