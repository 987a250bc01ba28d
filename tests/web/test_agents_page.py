"""The agents page: Admins register agents and see each key once; the keys work, and stop working."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient

from styrmin_backend.domain.roles import Role
from styrmin_backend.services import agents
from tests.api.conftest import ADMIN_PASSWORD, USER_PASSWORD, Stack
from tests.web.conftest import login_client, make_user

KEY = re.compile(r"sta_[A-Za-z0-9_-]{20,}")


def _claim(stack: Stack, key: str) -> int:
    """The status of an agent's claim with ``key`` (204: nothing to do, 401: the key is refused)."""
    response = stack.client.post("/api/v1/agent/claim", json={}, headers=stack.headers(key))
    return response.status_code


def _agent_names(stack: Stack) -> list[str]:
    with stack.session() as session:
        return [a.name for a in agents.list_agents(session)]


def _fresh_client(stack: Stack) -> TestClient:
    return TestClient(stack.client.app, raise_server_exceptions=False)


def test_an_admin_registers_an_agent_and_sees_its_working_key_once(web: Stack) -> None:
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    assert 'href="/agents"' in web.client.get("/deployments").text

    response = web.client.post(
        "/agents", data={"name": "eu-west-1", "cluster": "eu-west", "csrf_token": csrf}
    )

    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    key = KEY.search(response.text)
    assert key, response.text
    assert "STYRMIN_AGENT_SERVER_URL=" in response.text and "styrmin agent" in response.text
    assert _claim(web, key.group(0)) == 204
    page = web.client.get("/agents").text
    assert key.group(0) not in page
    row = re.search(r'<tr data-agent="eu-west-1">.*?</tr>', page, re.S)
    assert row and "<code>eu-west</code>" in row.group(0)
    assert "Connected" in row.group(0)  # the claim above was its first call


def test_a_bad_name_is_shown_beside_its_field_and_nothing_is_registered(web: Stack) -> None:
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)

    response = web.client.post("/agents", data={"name": "EU West", "cluster": "eu", "csrf_token": csrf})

    assert response.status_code == 422
    assert 'id="name-error"' in response.text and "is not a valid name" in response.text
    assert 'value="EU West"' in response.text
    assert "EU West" not in _agent_names(web) and not KEY.search(response.text)


def test_revoking_asks_first_then_the_key_stops_working(web: Stack) -> None:
    with web.session() as session:
        _, key = agents.create_agent(session, "edge", "edge")
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)

    asked = web.client.post("/agents/edge/revoke", data={"csrf_token": csrf})
    assert asked.status_code == 200 and "Revoke agent &#34;edge&#34;?" in asked.text
    assert _claim(web, key) == 204

    done = web.client.post(
        "/agents/edge/revoke", data={"csrf_token": csrf, "confirmed": "yes"}, follow_redirects=False
    )
    assert done.status_code == 303
    assert _claim(web, key) == 401
    row = re.search(r'<tr data-agent="edge">.*?</tr>', web.client.get("/agents").text, re.S)
    assert row and "Revoked" in row.group(0) and "Revoke…" not in row.group(0)


def test_a_new_key_replaces_the_old_one(web: Stack) -> None:
    with web.session() as session:
        _, old = agents.create_agent(session, "edge", "edge")
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)

    response = web.client.post("/agents/edge/key", data={"csrf_token": csrf, "confirmed": "yes"})

    new = KEY.search(response.text)
    assert response.status_code == 200 and new and new.group(0) != old
    assert _claim(web, old) == 401
    assert _claim(web, new.group(0)) == 204


def test_only_admins_see_or_change_agents(web: Stack) -> None:
    with web.session() as session:
        _, key = agents.create_agent(session, "edge", "edge")
    for username, role in (("reader", Role.READ_ONLY), ("operator", Role.READ_WRITE)):
        make_user(web, username, role)
        client = _fresh_client(web)
        csrf = login_client(client, username, USER_PASSWORD)
        assert 'href="/agents"' not in client.get("/deployments").text
        page = client.get("/agents")
        assert page.status_code == 403 and "this needs Admin" in page.text
        for path, form in (
            ("/agents", {"name": "sneaky", "cluster": "edge"}),
            ("/agents/edge/revoke", {"confirmed": "yes"}),
            ("/agents/edge/key", {"confirmed": "yes"}),
        ):
            refused = client.post(path, data={**form, "csrf_token": csrf})
            assert refused.status_code == 403, (username, path)
            assert not KEY.search(refused.text)
    assert _agent_names(web) == ["edge"]
    assert _claim(web, key) == 204


def test_a_revoked_agent_is_offered_a_restore_that_says_so(web: Stack) -> None:
    # "New key…" silently un-revoked an agent: its confirmation spoke only of the old key.
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    with web.session() as session:
        agents.create_agent(session, "edge", "edge")
        agents.revoke_agent(session, "edge")

    page = web.client.get("/agents")
    asked = web.client.post("/agents/edge/key", data={"csrf_token": csrf})

    assert 'aria-label="Restore agent edge with a new key"' in page.text
    assert asked.status_code == 200
    assert 'Agent "edge" is revoked: a new key makes it an agent again' in html.unescape(asked.text)
