"""Login throttling: repeated failures are refused for a while (429 + Retry-After), never for good.

The server's login clock is moved forward instead of sleeping out each Retry-After: the blocks are
real (stored in the database, shared by servers), only the waiting is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from styrmin_backend.domain.login_throttle import FREE_FAILURES_PER_ADDRESS, FREE_FAILURES_PER_USER, MAX_BLOCK
from styrmin_backend.server_app import create_app
from styrmin_backend.services import auth

from .conftest import ADMIN_PASSWORD, Stack


class LoginClock:
    """The time the login service sees: the real time plus however far a test has moved it on."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.ahead

    def wait(self, seconds: int) -> None:
        """Let ``seconds`` pass for the login service, at once."""
        self.ahead += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Iterator[LoginClock]:
    """The login service's clock, for this test."""
    login_clock = LoginClock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(auth, "utcnow", login_clock.now)
        yield login_clock


def _login(client: TestClient, password: str, username: str = "admin") -> tuple[int, str | None, str]:
    response = client.post("/api/v1/auth/login", json={"username": username, "password": password})
    return response.status_code, response.headers.get("retry-after"), response.json().get("message", "")


def _from(stack: Stack, address: str) -> TestClient:
    """A client of the same server calling from ``address``."""
    return TestClient(stack.client.app, client=(address, 40000), raise_server_exceptions=False)


def _block_for_a_while(client: TestClient, clock: LoginClock) -> None:
    """Fail logins as admin, waiting out each block, until a block lasts long enough to observe at leisure."""
    for n in range(FREE_FAILURES_PER_USER + 20):
        status, retry, _ = _login(client, f"guess-{n}")
        if status == 429 and retry is not None:
            if int(retry) >= 8:
                return
            clock.wait(int(retry))
    raise AssertionError("the logins were never blocked for 8 s or more")


def test_forty_wrong_passwords_are_throttled_and_retry_after_is_honoured(
    stack: Stack, clock: LoginClock
) -> None:
    attacker = _from(stack, "203.0.113.7")
    answers = [_login(attacker, f"guess-{n}") for n in range(40)]
    statuses = [status for status, _, _ in answers]
    assert statuses[:FREE_FAILURES_PER_USER] == [401] * FREE_FAILURES_PER_USER
    refused = [(retry, message) for status, retry, message in answers if status == 429]
    assert len(refused) >= 20, statuses
    for retry, message in refused:
        assert retry is not None and 1 <= int(retry) <= MAX_BLOCK.total_seconds()
        assert message.startswith('Too many failed logins as "admin" from your address; try again in')
    # While blocked, even the right password is refused from that address ...
    status, retry, _ = _login(attacker, ADMIN_PASSWORD)
    assert status == 429 and retry is not None
    # ... but the user logs in from their own address at once,
    assert _login(_from(stack, "198.51.100.20"), ADMIN_PASSWORD)[0] == 201
    # and from the attacker's address once the Retry-After it was given has passed.
    clock.wait(int(retry))
    assert _login(attacker, ADMIN_PASSWORD)[0] == 201


def test_a_successful_login_clears_the_failures(stack: Stack) -> None:
    client = _from(stack, "192.0.2.10")
    for n in range(FREE_FAILURES_PER_USER - 1):
        assert _login(client, f"guess-{n}")[0] == 401
    assert _login(client, ADMIN_PASSWORD)[0] == 201
    for n in range(FREE_FAILURES_PER_USER):
        assert _login(client, f"again-{n}")[0] == 401


def test_one_address_trying_many_user_names_is_throttled(stack: Stack, clock: LoginClock) -> None:
    client = _from(stack, "192.0.2.99")
    statuses = [_login(client, "wrong", username=f"user{n}")[0] for n in range(FREE_FAILURES_PER_ADDRESS)]
    assert statuses == [401] * FREE_FAILURES_PER_ADDRESS
    # Each further failure, whatever the user name, blocks the address twice as long as the one before.
    for n in range(20):
        status, retry, message = _login(client, "wrong", username=f"more{n}")
        if status == 429 and retry is not None:
            assert message.startswith("Too many failed logins from your address; try again in")
            if int(retry) >= 8:
                break
            clock.wait(int(retry))
    else:
        raise AssertionError("the address was never blocked for 8 s or more")
    status, retry, _ = _login(client, ADMIN_PASSWORD, username="admin")
    assert (status, retry is not None) == (429, True)
    assert _login(_from(stack, "192.0.2.100"), ADMIN_PASSWORD)[0] == 201


def test_failures_counted_by_one_server_are_refused_by_another(stack: Stack, clock: LoginClock) -> None:
    other_server = create_app(stack.settings, stack.engine)
    first = _from(stack, "192.0.2.50")
    second = TestClient(other_server, client=("192.0.2.50", 40001), raise_server_exceptions=False)
    _block_for_a_while(first, clock)
    status, retry_elsewhere, _ = _login(second, "another-guess")
    assert status == 429 and retry_elsewhere is not None


def test_the_login_page_is_throttled_too(stack: Stack, clock: LoginClock) -> None:
    client = _from(stack, "192.0.2.77")
    _block_for_a_while(client, clock)
    page = client.get("/login")
    csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    response = client.post(
        "/login", data={"csrf_token": csrf, "username": "admin", "password": ADMIN_PASSWORD}
    )
    assert response.status_code == 429
    assert response.headers["retry-after"]
    assert "Too many failed logins as" in response.text
