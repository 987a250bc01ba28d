"""The data dir and what Styrmin writes there are readable by their owner only."""

from __future__ import annotations

import stat
from pathlib import Path

from pydantic import SecretStr

from styrmin_backend.bootstrap import prepare_database
from styrmin_backend.settings import Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_dir_is_0700_and_its_database_log_and_password_file_0600(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "prefect").mkdir()
    (data / "prefect" / "prefect-server.log").write_text("started\n")
    (data / "prefect" / "prefect-server.log").chmod(0o644)
    prepared = prepare_database(Settings(data_dir=data, admin_password=None))
    prepared.engine.dispose()
    assert _mode(data) == 0o700
    assert _mode(data / "styrmin.db") == 0o600
    assert _mode(data / "admin-password.txt") == 0o600
    assert _mode(data / "prefect" / "prefect-server.log") == 0o600


def test_a_given_admin_password_is_not_written_to_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    prepare_database(Settings(data_dir=data, admin_password=SecretStr("a-given-password"))).engine.dispose()
    assert _mode(data) == 0o700
    assert not (data / "admin-password.txt").exists()
