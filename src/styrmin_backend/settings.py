"""Settings of the Styrmin server and agent, read from ``STYRMIN_*`` environment variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class Settings(BaseSettings):
    """Every setting, its environment variable and its default (see docs/configuration.md)."""

    model_config = SettingsConfigDict(env_prefix="STYRMIN_", extra="ignore")

    data_dir: Path = Field(
        default=Path.home() / ".local" / "share" / "styrmin",
        description="Folder for the SQLite database, the admin password file and other local state.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the database; default: the SQLite file styrmin.db in the data dir. "
        "PostgreSQL: postgresql+psycopg://user@host:5432/db",
    )
    host: str = Field(default="127.0.0.1", description="Address the server binds to.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port the server binds to.")
    public_url: str | None = Field(
        default=None, description="URL users and actions reach the server at; default http://HOST:PORT."
    )
    session_lifetime: timedelta = Field(
        default=timedelta(hours=12), description="How long a web session cookie stays valid."
    )
    api_token_lifetime: timedelta = Field(
        default=timedelta(days=30), description="Default lifetime of an API token made by a login."
    )
    api_token_max_lifetime: timedelta = Field(
        default=timedelta(days=365), description="Longest lifetime a user may ask for an API token."
    )
    actions_token_lifetime: timedelta = Field(
        default=timedelta(hours=2),
        description="Lifetime of the styrmin-actions token of one reconciliation (revoked at its end).",
    )
    admin_password: SecretStr | None = Field(
        default=None,
        description="Password of the admin user made on first start; default: generated, printed once "
        "and written to admin-password.txt (mode 0600) in the data dir.",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Fernet key(s) that encrypt secret configuration values in the database, comma-separated: "
        "the first encrypts, all decrypt (put a new key first to rotate). Default with the embedded SQLite "
        "database: generated once into secret-key.txt (mode 0600) in the data dir; required with "
        "STYRMIN_DATABASE_URL.",
    )
    log_level: LogLevel = Field(default="INFO", description="Level of the server's log.")
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines as text, or one JSON object a line (json) for a log collector; "
        "the agent follows it too. Secrets are redacted either way.",
    )
    schedule_seconds: float = Field(
        default=15,
        gt=0,
        le=3600,
        description="How often the server starts due scheduled backups and prunes old ones (each server; "
        "a due backup starts once whatever the number of servers).",
    )
    agent_gone_seconds: float = Field(
        default=5,
        ge=1,
        le=300,
        description="When an agent's process closes its presence connection (it crashed or was killed), "
        "how long the server waits for it to connect again before its running tasks end failed (their "
        "leases would otherwise run on).",
    )
    shutdown_grace_seconds: float = Field(
        default=10,
        ge=0,
        le=600,
        description="On SIGTERM, how long the server lets requests in flight finish before it exits.",
    )
    prefect_ui_url: str = Field(
        default="http://127.0.0.1:4200",
        description="Prefect UI that the task view links each action's flow run to.",
    )
    prefect_api_url: str = Field(
        default="",
        description="Prefect API the server reads actions' log lines from (`styrminctl tasks logs`); "
        "default: the Prefect UI's URL followed by /api.",
    )
    secure_cookies: bool = Field(
        default=False, description="Mark cookies Secure (set when the server is reached over HTTPS)."
    )

    @property
    def effective_database_url(self) -> str:
        """The database URL in force: the setting, or the SQLite file in the data dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'styrmin.db'}"

    @property
    def effective_prefect_api_url(self) -> str:
        """The Prefect API in force: the setting, or the UI's URL followed by /api."""
        return self.prefect_api_url or self.prefect_ui_url.rstrip("/") + "/api"

    @property
    def effective_public_url(self) -> str:
        """The URL the server is reached at."""
        return self.public_url or f"http://{self.host}:{self.port}"
