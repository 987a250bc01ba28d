"""Mounting the web UI on the server's FastAPI app."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from styrmin_backend.web.pages import router

STATIC_PATH = "/static"
"""Where the stylesheet and htmx are served."""


def install_web(app: FastAPI) -> None:
    """Serve the web UI's pages and static files from ``app`` (next to the API under /api)."""
    app.include_router(router)
    app.mount(STATIC_PATH, StaticFiles(directory=Path(__file__).parent / "static"), name="static")
