"""Starting the control plane: database, migrations, the first admin."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from styrmin_backend.data_dir import make_data_dir_private
from styrmin_backend.secret_keys import use_settings_keys
from styrmin_backend.services.users import FirstAdmin, ensure_admin
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_engine, make_session_factory, transaction
from styrmin_backend.store.migrate import migration_lock, upgrade_database
from styrmin_backend.store.secret_box import check_secret_keys


@dataclass(frozen=True)
class Prepared:
    """A migrated database and, on first start, the admin that was made."""

    engine: Engine
    first_admin: FirstAdmin | None


def prepare_database(settings: Settings) -> Prepared:
    """Open the database, apply migrations, and make the admin user on first start.

    Raises:
        SecretKeyProblem, SecretKeyWrong: when the secret keys are missing or not keys, or do not
            read the secret values stored already; each says what to do.
    """
    make_data_dir_private(settings.data_dir)
    engine = make_engine(settings.effective_database_url)
    use_settings_keys(engine, settings)
    password = settings.admin_password.get_secret_value() if settings.admin_password else None
    with migration_lock(engine):  # several replicas may start at once
        upgrade_database(engine)
        with transaction(make_session_factory(engine)) as session:
            first_admin = ensure_admin(session, password, settings.data_dir)
    check_secret_keys(engine)
    make_data_dir_private(settings.data_dir)
    return Prepared(engine, first_admin)
