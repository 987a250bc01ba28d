"""Agents as administrators manage them: register one for a cluster, list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request, Response

from styrmin_backend.api.deps import Admin, Db, api_router
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.schemas import AgentCreateRequest, AgentOut, IssuedAgentKeyOut
from styrmin_backend.services import agents

router = api_router(tags=["agents"])


@router.post("/agents", response_model=IssuedAgentKeyOut, status_code=201)
def create_agent(body: AgentCreateRequest, db: Db, _: Admin) -> IssuedAgentKeyOut:
    """Register an agent for a cluster; its key is shown only in this answer."""
    row, key = agents.create_agent(db, body.name, body.cluster)
    return IssuedAgentKeyOut(agent=AgentOut.model_validate(row), key=key)


@router.get("/agents", response_model=list[AgentOut])
def list_agents(
    db: Db,
    _: Admin,
    request: Request,
    response: Response,
    cluster: Annotated[
        str | None, Query(max_length=64, description="Only the agents of this cluster.")
    ] = None,
    limit: Limit = 500,
    cursor: Cursor = None,
) -> list[AgentOut]:
    """Every registered agent by name (or a cluster's)."""
    found = [
        AgentOut.model_validate(row)
        for row in agents.list_agents(db)
        if cluster is None or row.cluster == cluster
    ]
    return page_of(found, lambda a: a.name, limit=limit, cursor=cursor, request=request, response=response)


@router.delete("/agents/{name}", response_model=AgentOut)
def revoke_agent(name: Annotated[str, Path(max_length=64)], db: Db, _: Admin) -> AgentOut:
    """Revoke an agent's key."""
    return AgentOut.model_validate(agents.revoke_agent(db, name))
