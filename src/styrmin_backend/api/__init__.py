"""The REST API under /api/v1."""

from styrmin_backend.api.app import install_api

__all__ = ["install_api"]
