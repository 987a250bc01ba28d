"""The REST API under /api/v1."""

from styrmin_backend.api.app import install_api
from styrmin_backend.api.request_body import LimitRequestBody
from styrmin_backend.api.request_line import RefuseNulInRequestLine

__all__ = ["LimitRequestBody", "RefuseNulInRequestLine", "install_api"]
