"""The context Styrmin passes to every action: which deployment, which change, which hook step.

An action declares it as a flow parameter, ``context: GlobalContext``. Styrmin sends it to the action's
Prefect flow run as a plain JSON object, which Prefect turns back into a ``GlobalContext`` because of
that annotation, so it is stored on the flow run and shown in the Prefect UI.

It holds no secret: the token of the reconciliation reaches the action only through the
``STYRMIN_TOKEN`` environment variable of the action's process, where the primitives and the Python
SDK read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.drivers.configuration import DeploymentConfiguration


class GlobalContext(BaseModel):
    """What an action knows about the change it runs for. Serialisable, and free of secrets.

    Versions name the state the change moves the deployment to: ``driver_version`` is the change's
    target driver version (the one whose actions run) and ``configuration`` the new configuration,
    which may reach the cluster after the action starts.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    deployment_id: int = Field(description="Id of the deployment in Styrmin.")
    deployment_name: str = Field(description="Name of the deployment, also its Helm release name.")
    namespace: str = Field(description="Kubernetes namespace the deployment runs in.")
    cluster_id: str = Field(description="The cluster the deployment is bound to, served by one agent.")
    driver_name: str = Field(description="Name of the deployment's driver.")
    driver_version: str = Field(description="Driver version of the change: the target of an upgrade.")
    current_app_version: str | None = Field(
        description="Application version running before the change; None when the change creates it."
    )
    target_app_version: str = Field(description="Application version the change moves the deployment to.")
    configuration: DeploymentConfiguration = Field(
        default_factory=DeploymentConfiguration, description="The deployment's new configuration."
    )
    revision: int = Field(description="Revision of the change: every change of a deployment gets the next.")
    task_id: int = Field(description="Id of the task that records the change.")
    hook_step_id: int = Field(description="Id of the hook step that runs this action.")
    hook: Hook = Field(description="The hook that runs: setup, upgrade, backup or restore.")
    mode: Mode = Field(description="The hook's mode: pre, core or post.")
    api_url: str = Field(
        description="URL of the Styrmin API the primitives call; the token is in STYRMIN_TOKEN, not here."
    )
    backup_id: int | None = Field(
        default=None, description="In the backup and restore hooks: the backup taken or restored."
    )
    backup_folder: str | None = Field(
        default=None,
        description="In the backup and restore hooks: the folder of the backup's files, as Jobs see it "
        "(read it with backup_commands or the STYRMIN_BACKUP_DIR env var of their Job).",
    )
    backup_env: dict[str, str] = Field(
        default_factory=dict,
        description="In the backup and restore hooks of a bucket location: where the backup's objects are "
        "(STYRMIN_BACKUP_URL, AWS_REGION, AWS_ENDPOINT_URL_S3), set in execute_backup_commands' Jobs. "
        "Never credentials.",
    )
    backup_env_from: str | None = Field(
        default=None,
        description="The Secret of the deployment's namespace whose AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY execute_backup_commands' Jobs get (by reference; its values are not here).",
    )
