"""Probes and metrics for the cluster the server runs in: public, cheap, and outside ``/api/v1``.

``/healthz`` says the process answers (liveness); ``/readyz`` says it can serve: the database
answers, its schema is at the newest migration, and the server is not stopping (readiness).
``/metrics`` is public like the probes: it shows counts and durations, never names or secrets;
keep it off an Ingress that faces the internet (docs/production.md).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from styrmin_backend.services import readiness

router = APIRouter(include_in_schema=False)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Alive: the process answers HTTP (it touches nothing else)."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    """Ready: 200 when the database answers with the newest schema; 503 saying why otherwise."""
    if request.app.state.stopping.is_set():
        return _not_ready("The server is stopping.")
    reason = readiness.database_not_ready(request.app.state.engine)
    if reason is not None:
        return _not_ready(reason)
    return JSONResponse({"status": "ok"})


def _not_ready(reason: str) -> JSONResponse:
    return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """The server's Prometheus metrics in the text exposition format."""
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
