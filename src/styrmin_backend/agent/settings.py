"""Settings of `styrmin agent`, read from ``STYRMIN_AGENT_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from styrmin_backend.cluster.connection import SERVICE_ACCOUNT_DIR


class AgentSettings(BaseSettings):
    """Every setting of the agent, with its default (see docs/configuration.md)."""

    # By name too: the agent process of `styrmin up` gets its settings as JSON (agent.process).
    model_config = SettingsConfigDict(env_prefix="STYRMIN_AGENT_", extra="ignore", populate_by_name=True)

    server_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The Styrmin server's URL; several servers of one database: comma-separated (the agent "
        "uses the one that answers).",
    )
    retry_seconds: float = Field(
        default=90,
        ge=0,
        le=3600,
        validation_alias=AliasChoices("STYRMIN_AGENT_RETRY_SECONDS", "STYRMIN_RETRY_SECONDS"),
        description="How long a step's start, a task's end and the other calls a task needs wait for a "
        "Styrmin server (and its database) to serve again; the actions' primitives read STYRMIN_RETRY_SECONDS.",
    )
    key: SecretStr = Field(description="The agent's key, from `POST /api/v1/agents` (an admin makes it).")
    kubeconfig: Path | None = Field(
        default=None,
        description="Kubeconfig of the agent's cluster; default: KUBECONFIG, else the pod's service "
        "account (in-cluster), else ~/.kube/config.",
    )
    service_account_dir: Path = Field(
        default=SERVICE_ACCOUNT_DIR,
        description="Folder with the service account's token, ca.crt and namespace, used when no kubeconfig "
        "is given (Kubernetes mounts it in every pod).",
    )
    prefect_api_url: str | None = Field(
        default=None, description="Prefect server API the actions run on; default: PREFECT_API_URL."
    )
    data_dir: Path = Field(
        default=Path.home() / ".local" / "share" / "styrmin-agent", description="Where drivers are unpacked."
    )
    backup_dir: Path | None = Field(
        default=None,
        description="Folder of backups' files, shared with the cluster's pods; default: DATA_DIR/backups.",
    )
    concurrency: int = Field(default=8, ge=1, le=64, description="Tasks the agent runs at once.")
    lease_seconds: int = Field(
        default=30, ge=5, le=3600, description="Lease of a claimed task; renewed at a third."
    )
    poll_seconds: float = Field(default=0.5, gt=0, le=60, description="Pause after a failed claim.")
    claim_wait_seconds: float = Field(
        default=5, ge=0, le=30, description="How long one claim waits on the server for a task (long poll)."
    )
    status_seconds: float = Field(
        default=30, gt=0, le=3600, description="How often the component workloads are reported between tasks."
    )
    prefect_check_seconds: float = Field(
        default=2, gt=0, le=60, description="How often the agent checks that the Prefect server answers."
    )
    prefect_outage_seconds: float = Field(
        default=10,
        ge=0,
        le=600,
        description="How long the Prefect server may not answer before the running actions are stopped.",
    )
    helm_max_history: int = Field(
        default=10,
        ge=0,
        le=10_000,
        description="Revisions of each deployment's Helm release that an upgrade keeps (Helm's "
        "--history-max); 0: all, each upgrade then slower than the one before.",
    )
    runner_pool_size: int = Field(
        default=4, ge=1, le=32, description="Pre-started processes for actions (about 160 MiB each)."
    )
    stop_grace_seconds: float = Field(
        default=300,
        ge=0,
        le=86400,
        description="On SIGTERM, how long running tasks may go on before the agent ends them failed.",
    )
    metrics_port: int = Field(
        default=0, ge=0, le=65535, description="Port of the agent's Prometheus metrics; 0: none."
    )
