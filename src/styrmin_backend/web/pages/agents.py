"""The agents page (Admin only): register an agent and see its key once, issue a new key, revoke."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from styrmin_backend.domain.errors import DomainError
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import agents
from styrmin_backend.web._common import (
    Form,
    Viewer,
    WebRoute,
    check_form,
    check_role,
    confirm_page,
    is_confirmed,
    render,
    see_other,
    status_of,
    text,
    unit,
    viewer_of,
)
from styrmin_backend.web._forms import FormErrors, place_error

router = APIRouter(route_class=WebRoute, include_in_schema=False)

_AGENT_FIELDS = {"name": "name", "cluster": "cluster"}


@dataclass(frozen=True)
class IssuedKey:
    """A key just made, shown on this one answer."""

    name: str
    cluster: str
    key: str


def _render(
    request: Request,
    viewer: Viewer,
    session: Session,
    *,
    errors: FormErrors | None = None,
    fields: dict[str, str] | None = None,
    issued: IssuedKey | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    response = render(
        request,
        "agents.html",
        viewer,
        status_code,
        agents=agents.list_agents(session),
        errors=errors or FormErrors(),
        fields=fields or {},
        issued=issued,
        server_url=request.app.state.settings.effective_public_url,
    )
    if issued is not None:
        response.headers["Cache-Control"] = "no-store"  # the key must not stay in a cache
    return response


@router.get("/agents")
def agents_page(request: Request) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_role(viewer, Role.ADMIN)
        return _render(request, viewer, session)


@router.post("/agents")
def register_agent(request: Request, form: Form) -> Response:
    fields = {"name": text(form, "name").strip(), "cluster": text(form, "cluster").strip()}
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.ADMIN)
        try:
            row, key = agents.create_agent(session, fields["name"], fields["cluster"])
        except DomainError as error:
            session.rollback()
            errors = FormErrors()
            place_error(error, errors, _AGENT_FIELDS)
            return _render(
                request, viewer, session, errors=errors, fields=fields, status_code=status_of(error)
            )
        return _render(
            request, viewer, session, issued=IssuedKey(row.name, row.cluster, key), status_code=201
        )


@router.post("/agents/{name}/key")
def new_agent_key(request: Request, name: str, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.ADMIN)
        row = next((a for a in agents.list_agents(session) if a.name == name), None)
        if row is None:
            errors = FormErrors()
            errors.add(None, f'There is no agent "{name}".')
            return _render(request, viewer, session, errors=errors, status_code=404)
        if not is_confirmed(form):
            return confirm_page(
                request,
                viewer,
                title=f'Issue a new key for agent "{name}"?',
                lines=[
                    f'Agent "{name}" is revoked: a new key makes it an agent again, and the agent started '
                    "with that key claims its cluster's tasks."
                    if row.revoked
                    else "The agent's current key stops working at once: the agent running with it gets 401 "
                    "until it is restarted with the new key.",
                ],
                action=f"/agents/{name}/key",
                button="Issue a new key",
                cancel="/agents",
                section="agents",
            )
        key = agents.rotate_agent_key(session, name, row.cluster)
        return _render(request, viewer, session, issued=IssuedKey(name, row.cluster, key))


@router.post("/agents/{name}/revoke")
def revoke_agent(request: Request, name: str, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.ADMIN)
        if not is_confirmed(form):
            return confirm_page(
                request,
                viewer,
                title=f'Revoke agent "{name}"?',
                lines=[
                    "Its key stops working at once. Tasks it is running end failed when their lease runs "
                    "out; pending tasks of its cluster wait for another agent.",
                ],
                action=f"/agents/{name}/revoke",
                button=f"Revoke {name}",
                cancel="/agents",
                danger=True,
                section="agents",
            )
        try:
            agents.revoke_agent(session, name)
        except DomainError as error:
            session.rollback()
            errors = FormErrors()
            errors.add(None, error.message)
            return _render(request, viewer, session, errors=errors, status_code=status_of(error))
    return see_other("/agents")
