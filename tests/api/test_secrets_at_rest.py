"""Secret configuration values at rest: the database holds them only encrypted, with STYRMIN_SECRET_KEY's
keys (rotation: new key first, old ones after); the agent and a task's own actions read them in plain."""

from __future__ import annotations

from typing import Any

from cryptography.fernet import Fernet
from sqlalchemy import text

from styrmin_backend.store.models import Base
from styrmin_backend.store.secret_box import SecretBox, reencrypt_secret_values, use_secret_keys
from tests.api.test_backups import FILES, _agent, _push, _run_next

from .conftest import Stack
from .test_secrets import CONFIGURATION, SECRETS

NEW_SECRET = "tok-second-789"


def _database_text(stack: Stack) -> str:
    """Every row of every table, as plain SQL reads it (what someone with the database file sees)."""
    lines = []
    with stack.engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            lines += [repr(tuple(row)) for row in connection.execute(text(f"SELECT * FROM {table.name}"))]  # noqa: S608
    return "\n".join(lines)


def _create(stack: Stack) -> None:
    _push(stack)
    body = {"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"}
    response = stack.client.post(
        "/api/v1/deployments", json={**body, "configuration": CONFIGURATION}, headers=_admin(stack)
    )
    assert response.status_code == 202, response.text


def _admin(stack: Stack) -> dict[str, str]:
    return stack.headers(stack.token_for("admin"))


def _configure_new_token(stack: Stack) -> None:
    shown = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack)).json()["configuration"]
    shown["env"]["server"]["API_TOKEN"] = NEW_SECRET
    change = stack.client.put("/api/v1/deployments/shop/configuration", json=shown, headers=_admin(stack))
    assert change.status_code == 202, change.text


def _claimed_configuration(claim: dict[str, Any]) -> dict[str, Any]:
    configuration: dict[str, Any] = claim["change"]["target"]["configuration"]
    return {key: value for key, value in configuration.items() if key != "images"}


def test_secret_values_are_stored_encrypted_and_the_agent_reads_them_in_plain(stack: Stack) -> None:
    _create(stack)
    agent = _agent(stack)
    created = _run_next(stack, agent, result={"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}})
    _configure_new_token(stack)
    stored = _database_text(stack)
    for secret in (*SECRETS, NEW_SECRET):
        assert secret not in stored
    assert "$styrmin-encrypted" in stored
    assert "debug" in stored  # a value that is not secret stays readable
    assert _claimed_configuration(created) == CONFIGURATION
    configured = _claimed_configuration(_run_next(stack, agent))
    assert configured["env"]["server"]["API_TOKEN"] == NEW_SECRET
    assert configured["values"]["database"] == CONFIGURATION["values"]["database"]


def test_after_a_key_rotation_old_values_are_read_and_new_ones_use_the_new_key(stack: Stack) -> None:
    old_key = (stack.settings.data_dir / "secret-key.txt").read_text().strip()
    _create(stack)
    new_key = Fernet.generate_key().decode()
    use_secret_keys(stack.engine, SecretBox([new_key, old_key]))
    shown = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack))
    assert shown.status_code == 200, shown.text
    _configure_new_token(stack)
    agent = _agent(stack)
    assert _claimed_configuration(_run_next(stack, agent)) == CONFIGURATION
    reencrypt_secret_values(stack.engine)  # as `styrmin db reencrypt-secrets` does; then the old key goes
    use_secret_keys(stack.engine, SecretBox([new_key]))
    configured = _claimed_configuration(_run_next(stack, agent))
    assert configured["env"]["server"]["API_TOKEN"] == NEW_SECRET


def test_a_wrong_key_is_an_error_naming_styrmin_secret_key(stack: Stack) -> None:
    _create(stack)
    use_secret_keys(stack.engine, SecretBox([Fernet.generate_key().decode()]))
    response = stack.client.get("/api/v1/deployments/shop", headers=_admin(stack))
    assert response.status_code == 503
    message = response.json()["message"]
    assert "STYRMIN_SECRET_KEY" in message and "Traceback" not in response.text
    assert "the new key first, then the old ones" in message


def test_a_restore_brings_back_the_backups_secret_values(stack: Stack) -> None:
    _create(stack)
    agent = _agent(stack)
    _run_next(stack, agent, result={"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}})
    taken = stack.client.post("/api/v1/deployments/shop/backups", json={}, headers=_admin(stack))
    assert taken.status_code == 202, taken.text
    _run_next(stack, agent, result={"backup": {"location": "folder /srv/backups", "files": FILES}})
    _configure_new_token(stack)
    _run_next(stack, agent)
    restore = stack.client.post(
        "/api/v1/deployments/shop/restore",
        json={"backup_id": taken.json()["backup"]["id"]},
        headers=_admin(stack),
    )
    assert restore.status_code == 202, restore.text
    stored = _database_text(stack)
    for secret in (*SECRETS, NEW_SECRET):
        assert secret not in stored
    restored = _run_next(stack, agent)
    assert restored["change_type"] == "restore"
    assert _claimed_configuration(restored) == CONFIGURATION
