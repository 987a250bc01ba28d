"""The web UI: server-rendered pages for deployments, tasks, users and drivers."""

from styrmin_backend.web.app import STATIC_PATH, error_page, install_web, refused_page

__all__ = ["STATIC_PATH", "error_page", "install_web", "refused_page"]
