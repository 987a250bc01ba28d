"""The key of secret values at rest: the migration encrypts values stored before, a server without a
key or with the wrong one refuses to start and says what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import Engine, select, text

from styrmin_backend.bootstrap import prepare_database
from styrmin_backend.domain.errors import SecretKeyWrong
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_engine, make_session_factory
from styrmin_backend.store.migrate import _config, upgrade_database
from styrmin_backend.store.models import DeploymentRow
from styrmin_backend.store.secret_box import SecretBox, use_secret_keys

from .test_migrations import empty_database_url as empty_database_url

CONFIGURATION = {
    "values": {
        "db": {"password": "hunter2-value", "url": "postgres://shop:s3cr3t-pw@db/shop"},
        "replicas": 2,
    },
    "env": {"server": {"API_TOKEN": "tok-abcdef123", "LOG_LEVEL": "debug"}},
}
SECRETS = ("hunter2-value", "s3cr3t-pw", "tok-abcdef123")


def _migrate_to(engine: Engine, revision: str) -> None:
    with engine.begin() as connection:
        config = _config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _insert_plain_deployment(engine: Engine) -> None:
    now = datetime.now(UTC)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO deployments (name, namespace, cluster, driver_name, driver_version, app_version, "
                "configuration, stopped_components, status, last_revision, created_at, updated_at) VALUES "
                "('shop', 'shop', 'local', 'shop', '1.0.0', '1.0.0', :configuration, '[]', 'running', 1, "
                ":now, :now)"
            ),
            {"configuration": json.dumps(CONFIGURATION), "now": now},
        )
        deployment_id = connection.execute(text("SELECT id FROM deployments")).scalar_one()
        connection.execute(
            text(
                "INSERT INTO changes (deployment_id, revision, type, spec, requested_by, created_at) "
                "VALUES (:id, 1, 'create', :spec, 'admin', :now)"
            ),
            {"id": deployment_id, "spec": json.dumps({"configuration": CONFIGURATION}), "now": now},
        )


def _stored_text(engine: Engine) -> str:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT configuration FROM deployments")).all()
        rows += connection.execute(text("SELECT spec FROM changes")).all()
    return repr(rows)


def test_the_migration_encrypts_secret_values_stored_in_plain_text(empty_database_url: str) -> None:
    engine = make_engine(empty_database_url)
    _migrate_to(engine, "0006_backup_locations")
    _insert_plain_deployment(engine)
    with pytest.raises(RuntimeError, match="STYRMIN_SECRET_KEY"):
        upgrade_database(engine)  # no key given: refused, nothing changed
    assert "hunter2-value" in _stored_text(engine)
    use_secret_keys(engine, SecretBox([Fernet.generate_key().decode()]))
    upgrade_database(engine)
    stored = _stored_text(engine)
    assert all(secret not in stored for secret in SECRETS) and "debug" in stored
    with make_session_factory(engine)() as session:
        assert session.scalars(select(DeploymentRow.configuration)).one() == CONFIGURATION
    engine.dispose()
    if empty_database_url.startswith("sqlite"):  # the file itself keeps no old copy either
        database = Path(empty_database_url.removeprefix("sqlite:///"))
        files = [database, database.with_name(database.name + "-wal")]
        raw = b"".join(path.read_bytes() for path in files if path.exists())
        assert all(secret.encode() not in raw for secret in SECRETS)


def test_a_server_with_the_wrong_key_refuses_to_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'styrmin.db'}"
    first = Settings(
        data_dir=tmp_path / "data", database_url=url, secret_key=SecretStr(Fernet.generate_key().decode())
    )
    prepared = prepare_database(first)
    _insert_encrypted_deployment(prepared.engine)
    prepared.engine.dispose()
    wrong = first.model_copy(update={"secret_key": SecretStr(Fernet.generate_key().decode())})
    with pytest.raises(SecretKeyWrong, match="STYRMIN_SECRET_KEY"):
        prepare_database(wrong)


def _insert_encrypted_deployment(engine: Engine) -> None:
    now = datetime.now(UTC)
    with make_session_factory(engine)() as session, session.begin():
        session.add(
            DeploymentRow(
                name="shop",
                namespace="shop",
                cluster="local",
                driver_name="shop",
                driver_version="1.0.0",
                app_version="1.0.0",
                configuration=CONFIGURATION,
                stopped_components=[],
                status="running",
                last_revision=1,
                created_at=now,
                updated_at=now,
            )
        )


def _styrmin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command_line = [sys.executable, "-m", "styrmin_backend.cli", *args]
    inherited = {name: value for name, value in os.environ.items() if name != "STYRMIN_SECRET_KEY"}
    return subprocess.run(command_line, env={**inherited, **env}, capture_output=True, text=True, timeout=120)


def test_a_server_on_its_own_database_without_a_key_refuses_to_start_saying_how_to_make_one(
    tmp_path: Path,
) -> None:
    env = {
        "STYRMIN_DATA_DIR": str(tmp_path / "data"),
        "STYRMIN_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
    }
    env = {**env, "STYRMIN_PORT": "0"}
    ended = _styrmin("server", env=env)
    assert ended.returncode == 1
    assert "STYRMIN_SECRET_KEY" in ended.stderr and "Fernet.generate_key()" in ended.stderr
    assert "Traceback" not in ended.stderr


def test_the_embedded_database_gets_a_private_key_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    prepare_database(settings).engine.dispose()
    key_file = tmp_path / "data" / "secret-key.txt"
    key = key_file.read_text()
    assert key_file.stat().st_mode & 0o777 == 0o600
    prepare_database(settings).engine.dispose()
    assert key_file.read_text() == key
