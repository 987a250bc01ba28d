"""A cluster's backup location through the API: set by an Admin, checked by the cluster's agent, read by
everyone, used by new backups once ready; never any credential, only the Secret's name."""

from __future__ import annotations

import threading
import time
from typing import Any

from styrmin_backend.domain.roles import Role

from .conftest import Stack
from .test_backups import _admin, _agent, _deployed_shop, _run_next

S3 = {
    "kind": "s3",
    "bucket": "styrmin-backups",
    "prefix": "/team/prod/",
    "endpoint_url": "http://127.0.0.1:9000",
    "secret": "styrmin/backup-bucket",
}
URL = "/api/v1/clusters/local/backup-location"


def _set(stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    response = stack.client.put(URL, json=body, headers=_admin(stack))
    assert response.status_code == 202, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _check(stack: Stack, agent: dict[str, str], error: str | None) -> dict[str, Any]:
    pending = stack.client.get("/api/v1/agent/backup-location-checks", headers=agent)
    assert pending.status_code == 200, pending.text
    checked = stack.client.post(
        f"/api/v1/agent/backup-location-checks/{pending.json()['id']}",
        json={"error": error},
        headers=agent,
    )
    assert checked.status_code == 204, checked.text
    body: dict[str, Any] = pending.json()
    return body


def test_a_location_is_used_only_once_its_agent_checked_it(stack: Stack) -> None:
    agent = _agent(stack)
    assert stack.client.get(URL, headers=_admin(stack)).json() == {
        "cluster": "local",
        "in_use": None,
        "latest": None,
    }

    proposed = _set(stack, S3)

    assert (proposed["status"], proposed["description"], proposed["secret"]) == (
        "checking",
        "s3://styrmin-backups/team/prod at http://127.0.0.1:9000",
        "styrmin/backup-bucket",
    )
    assert stack.client.get(URL, headers=_admin(stack)).json()["in_use"] is None
    sent = _check(stack, agent, None)
    assert sent["location"] == {
        "kind": "s3",
        "bucket": "styrmin-backups",
        "prefix": "team/prod",
        "endpoint_url": "http://127.0.0.1:9000",
        "secret_namespace": "styrmin",
        "secret_name": "backup-bucket",
    }
    found = stack.client.get(URL, headers=_admin(stack)).json()
    assert (found["in_use"]["id"], found["in_use"]["status"], found["latest"]) == (
        proposed["id"],
        "ready",
        None,
    )
    assert stack.client.get("/api/v1/agent/backup-location-checks", headers=agent).status_code == 204


def test_a_location_that_fails_its_check_changes_nothing_and_says_what_failed(stack: Stack) -> None:
    agent = _agent(stack)
    first = _set(stack, {"kind": "folder", "folder": "/srv/backups"})
    _check(stack, agent, None)
    _set(stack, S3)
    _check(
        stack,
        agent,
        "Could not write the probe object s3://styrmin-backups/team/prod/.styrmin-probe: NoSuchBucket",
    )

    found = stack.client.get(URL, headers=_admin(stack)).json()

    assert found["in_use"]["id"] == first["id"]
    assert found["latest"]["status"] == "failed"
    assert found["latest"]["error"].endswith("NoSuchBucket")


def test_new_backups_go_to_the_location_in_use_and_restores_read_from_theirs(stack: Stack) -> None:
    agent = _deployed_shop(stack)
    _set(stack, S3)
    _check(stack, agent, None)
    taken = stack.client.post("/api/v1/deployments/shop/backups", json={}, headers=_admin(stack)).json()
    files = [{"name": "db", "size": 1, "sha256": "ab" * 32}]
    claim = _run_next(stack, agent, result={"backup": {"location": "ignored", "files": files}})
    assert claim["change"]["location"]["bucket"] == "styrmin-backups"
    assert taken["backup"]["location"] == "s3://styrmin-backups/team/prod at http://127.0.0.1:9000"
    # Another location later: the backup is still read from the bucket it went to.
    _set(stack, {"kind": "folder", "folder": "/srv/backups"})
    _check(stack, agent, None)

    restored = stack.client.post(
        "/api/v1/deployments/shop/restore", json={"backup_id": taken["backup"]["id"]}, headers=_admin(stack)
    )

    assert restored.status_code == 202, restored.text
    claim = _run_next(stack, agent)
    assert claim["change"]["location"]["bucket"] == "styrmin-backups"


def test_only_an_admin_sets_a_location_and_every_signed_in_user_sees_where(stack: Stack) -> None:
    writer = stack.headers(stack.make_user("writer", Role.READ_WRITE))
    reader = stack.headers(stack.make_user("reader", Role.READ_ONLY))
    _set(stack, S3)

    for headers in (writer, reader):
        assert stack.client.put(URL, json=S3, headers=headers).status_code == 403
        found = stack.client.get(URL, headers=headers)
        assert found.status_code == 200
        assert found.json()["latest"]["secret"] == "styrmin/backup-bucket"
    assert stack.client.get(URL).status_code == 401
    _, actions = stack.actions_token()
    assert stack.client.put(URL, json=S3, headers=stack.headers(actions)).status_code == 403


def test_a_location_that_is_not_valid_is_refused_naming_the_field(stack: Stack) -> None:
    cases = [
        ({"kind": "tape"}, "kind"),
        ({"kind": "folder", "folder": "relative/path"}, "folder"),
        ({"kind": "folder", "folder": "/srv", "bucket": "b"}, "bucket"),
        ({**S3, "bucket": "Not_A_Bucket"}, "bucket"),
        ({**S3, "prefix": "a/../b"}, "prefix"),
        ({**S3, "endpoint_url": "http://user:pw@minio:9000"}, "endpoint_url"),
        ({**S3, "secret": "no-namespace"}, "secret"),
        ({**S3, "access_key": "AKIA..."}, "access_key"),
    ]
    for body, field in cases:
        response = stack.client.put(URL, json=body, headers=_admin(stack))
        assert response.status_code == 422, (body, response.text)
        assert field in response.text, (body, response.text)
    assert stack.client.get(URL, headers=_admin(stack)).json()["latest"] is None


def test_an_agent_waiting_for_a_location_to_check_gets_it_as_soon_as_it_is_set(stack: Stack) -> None:
    agent = _agent(stack)
    waiters = stack.client.app.state.location_waiters  # type: ignore[attr-defined]
    answers: list[Any] = []
    asking = threading.Thread(
        target=lambda: answers.append(
            stack.client.get(
                "/api/v1/agent/backup-location-checks", params={"wait_seconds": 30}, headers=agent
            )
        )
    )
    asking.start()
    deadline = time.monotonic() + 60
    while waiters.waiting("local") == 0 and asking.is_alive():
        assert time.monotonic() < deadline, "the agent's ask never waited"
        time.sleep(0.01)

    proposed = _set(stack, S3)
    asking.join(90)

    # Not woken, the ask would answer 204 once its 30 s were over.
    assert answers and answers[0].status_code == 200, answers and answers[0].text
    assert answers[0].json()["id"] == proposed["id"]


def test_a_waiting_ask_for_a_location_check_bounds_its_wait(stack: Stack) -> None:
    agent = _agent(stack)
    too_long = stack.client.get(
        "/api/v1/agent/backup-location-checks", params={"wait_seconds": 31}, headers=agent
    )
    assert too_long.status_code == 422 and "wait_seconds" in too_long.text
    assert (
        stack.client.get(
            "/api/v1/agent/backup-location-checks", params={"wait_seconds": 0.05}, headers=agent
        ).status_code
        == 204
    )
    unauthenticated = stack.client.get("/api/v1/agent/backup-location-checks", params={"wait_seconds": 1})
    assert unauthenticated.status_code == 401
