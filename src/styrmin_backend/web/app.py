"""Mounting the web UI on the server's FastAPI app."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from styrmin_backend.web._common import render
from styrmin_backend.web.pages import ROUTES

STATIC_PATH = "/static"
"""Where the stylesheet and htmx are served."""


def install_web(app: FastAPI) -> None:
    """Serve the web UI's pages and static files from ``app`` (next to the API under /api)."""
    # As they are, not through include_router: see styrmin_backend.api.app.install_api.
    app.router.routes.extend(ROUTES)
    app.mount(STATIC_PATH, StaticFiles(directory=Path(__file__).parent / "static"), name="static")


def refused_page(request: Request, message: str, status: int = 422) -> Response:
    """The page that refuses a request the server cannot act on (422, or 413 for a body too large),
    saying what to change."""
    return render(request, "error.html", None, status, title="The request was refused", message=message)


_TITLES = {404: "Not found", 405: "Not allowed here"}


def error_page(request: Request, status: int, message: str) -> Response:
    """The page a browser gets for an address no page answers (404), a method it does not take (405),
    or path and query values a page cannot read (422): the UI's page, never the API's JSON."""
    title = _TITLES.get(status, "The request was refused")
    return render(request, "error.html", None, status, title=title, message=message)
