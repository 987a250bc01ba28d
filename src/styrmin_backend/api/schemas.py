"""Request and answer bodies of the API."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from styrmin_backend.domain.deployments import check_env_var_name
from styrmin_backend.domain.limits import OUTPUT_TAIL_MAX_BYTES
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import SECRET_SET, conceal_configuration
from styrmin_backend.domain.status import DeploymentStatus, Status
from styrmin_backend.domain.storable import unstorable_part
from styrmin_backend.domain.tasks import StepStatus, TaskStatus, TaskType
from styrmin_backend.domain.waiting import AgentState, WaitReason
from styrmin_backend.drivers import (
    ActionSummary,
    ComponentSummary,
    DeploymentConfiguration,
    DriverSpec,
    check_image_overrides,
    check_values,
)
from styrmin_backend.protocol import Change, ClaimedHelmLock, ClaimedStep, ComponentStatus, TaskResult
from styrmin_backend.services.deployment_models import Deployment
from styrmin_backend.services.drivers import DriverVersion
from styrmin_backend.services.tasks import TaskDetail

Name = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A name people type: no control characters (tab, newline, NUL)."""
Version = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
]
ComponentName = Annotated[str, StringConstraints(min_length=1, max_length=63)]
MAX_ID = 2**63 - 1
"""Ids are 64-bit; larger numbers are refused as bad input rather than reaching the database."""


class Strict(BaseModel):
    """A request body: unknown fields are refused so that a typo is never silently ignored."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        # What no database, JSON document or Helm chart holds: refused here, naming the field.
        found = unstorable_part(data)
        if found is not None:
            where, problem = found
            raise ValueError(f"{where or 'the body'} {problem}")
        return data


class Answer(BaseModel):
    """An answer body built from a service's read model by field name: ``Out.model_validate(read)``.
    Where the wire name differs from the read model's, the field's ``validation_alias`` names the
    read model's; an answer's own JSON is read by its field names too."""

    model_config = ConfigDict(from_attributes=True, validate_by_name=True, validate_by_alias=True)


# --- auth --------------------------------------------------------------------------------------


class LoginRequest(Strict):
    username: Name
    password: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    token_name: Annotated[str, StringConstraints(max_length=128)] = "login"  # noqa: S105
    expires_in_seconds: StrictInt | None = Field(
        default=None, ge=60, le=10 * 365 * 24 * 3600, description="Lifetime; default: the server's setting."
    )


class IssuedTokenOut(BaseModel):
    id: int
    token: str = Field(description="The token itself; shown only now, store it safely.")
    expires_at: datetime


class SessionOut(BaseModel):
    username: str
    role: Role
    expires_at: datetime
    csrf_token: str


class TokenCreateRequest(Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    expires_in_seconds: StrictInt | None = Field(default=None, ge=60, le=10 * 365 * 24 * 3600)


class TokenOut(Answer):
    id: int
    name: str
    kind: str
    created_at: datetime
    expires_at: datetime


class WhoAmI(BaseModel):
    username: str
    role: Role
    builtin: bool
    token_kind: str


# --- users -------------------------------------------------------------------------------------


class UserOut(Answer):
    username: str
    role: Role
    active: bool = Field(validation_alias="is_active")
    builtin: bool = Field(
        validation_alias="is_builtin",
        description="Built-in users (styrmin-actions) have no password and cannot log in.",
    )
    has_password: bool
    created_at: datetime


class UserCreateRequest(Strict):
    username: Name
    role: Role
    password: Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class UserUpdateRequest(Strict):
    role: Role | None = None
    active: StrictBool | None = None


class PasswordRequest(Strict):
    password: Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class PasswordResetOut(BaseModel):
    username: str
    password: str = Field(description="The new password; shown only now.")


# --- deployments -------------------------------------------------------------------------------


class ConfigurationIn(Strict):
    values: Annotated[dict[str, Any], AfterValidator(check_values)] = Field(
        default_factory=dict, description="Helm values for the driver's chart."
    )
    images: Annotated[
        dict[ComponentName, Annotated[str, StringConstraints(min_length=1, max_length=512)]],
        AfterValidator(check_image_overrides),
    ] = Field(
        default_factory=dict,
        description="Image override per component; may contain {{ app.version }}.",
    )
    env: dict[
        ComponentName,
        dict[
            Annotated[str, AfterValidator(check_env_var_name)],
            Annotated[str, StringConstraints(max_length=32768)],
        ],
    ] = Field(default_factory=dict, description="Env vars per component, set on its component container.")

    def to_domain(self) -> DeploymentConfiguration:
        """The configuration the services take (validated by the same rules, frozen)."""
        return DeploymentConfiguration.model_validate(self.model_dump())


class DeploymentCreateRequest(Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=53)]
    namespace: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    driver: Name
    driver_version: Version
    app_version: Version | None = Field(
        default=None, description="Default: the driver's application version."
    )
    configuration: ConfigurationIn = Field(default_factory=ConfigurationIn)
    cluster: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        default="local",
        description="The cluster the deployment runs in; that cluster's agent carries out its changes.",
    )


class UpgradeRequest(Strict):
    app_version: Version | None = None
    driver_version: Version | None = None
    started_by_step: StrictInt | None = Field(
        default=None, ge=1, le=MAX_ID, description="Set by Styrmin's actions only."
    )


class ComponentsRequest(Strict):
    components: list[ComponentName] = Field(min_length=1, max_length=100)
    started_by_step: StrictInt | None = Field(
        default=None, ge=1, le=MAX_ID, description="Set by Styrmin's actions only."
    )


class ComponentsStatusRequest(Strict):
    components: list[ComponentStatus] = Field(max_length=100)


class DeploymentOut(Answer):
    id: int
    name: str
    namespace: str
    cluster: str
    driver: str = Field(validation_alias="driver_name")
    driver_version: str
    app_version: str
    running_app_version: str | None = Field(description="What the cluster runs, as last applied.")
    running_driver_version: str | None
    configuration: dict[str, Any] = Field(
        description=f'Secret values (see docs/configuration.md) are shown only as "{SECRET_SET}" when set.'
    )
    stopped_components: list[str]
    components_status: list[ComponentStatus] | None = Field(
        default=None,
        description=(
            "The component workloads as the agent last reported them (a change within its status "
            "period, the rest every tenth); null before it reported."
        ),
    )
    components_status_at: datetime | None = None
    status: DeploymentStatus = Field(
        description="deploying, running, upgrade-failed, stopped, failed, deleting or deleted (see the "
        "status rule in docs/api.md)."
    )
    status_reason: str = Field(default="", description="One sentence saying why the status is what it is.")
    status_task_id: int | None = Field(default=None, description="The task that decided the status.")
    revision: int = Field(validation_alias="last_revision")
    created_at: datetime
    updated_at: datetime

    @field_validator("components_status")
    @classmethod
    def _null_before_report(cls, value: list[ComponentStatus] | None) -> list[ComponentStatus] | None:
        return value or None

    @classmethod
    def of(
        cls, deployment: Deployment, status: Status | None = None, *, with_secrets: bool = False
    ) -> DeploymentOut:
        """The deployment as users read it, secret values concealed, with its ``status`` as the status
        rule decides it; ``with_secrets`` only for the agent that applies it."""
        shown: dict[str, Any] = dict(deployment)  # its fields: validated once, as a dict
        if not with_secrets:
            shown["configuration"] = conceal_configuration(deployment.configuration)
        if status is not None:
            shown.update(status=status.state, status_reason=status.reason, status_task_id=status.task_id)
        return cls.model_validate(shown)


# --- tasks -------------------------------------------------------------------------------------


class WaitingOut(Answer):
    reason: WaitReason = Field(
        description="no-agent (no agent of its cluster is connected), not-claimed (an agent is connected "
        "and no task of its cluster runs, yet it has not claimed this one), slots-taken (every slot of its "
        "cluster's agents is taken) or helm-operation (it waits for another task's Helm operation)."
    )
    message: str = Field(description="Why it waits, as a sentence.")
    task_id: int | None = Field(description="For helm-operation: the task whose Helm operation it waits for.")


class TaskSummary(Answer):
    id: int
    type: TaskType
    status: TaskStatus
    deployment: str = Field(validation_alias="deployment_name")
    revision: int | None
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    parent_task_id: int | None
    cancelled_by: str | None = Field(
        default=None, description="Who cancelled the task; null unless cancelled."
    )
    cancelled_at: datetime | None = None
    stopped_at: datetime | None = Field(
        default=None,
        description="For a cancelled task: when its work stopped (its agent stopped the running action); "
        "null while the agent still stops it.",
    )
    waiting: WaitingOut | None = Field(
        default=None,
        description="Why a pending task has not started, or a running one waits; null otherwise.",
    )


class ChangeOut(BaseModel):
    deployment: DeploymentOut
    task: TaskSummary | None = Field(
        description="The task that carries out the change; null when nothing changes."
    )


class TaskPageOut(BaseModel):
    items: list[TaskSummary]
    next_before: int | None = Field(
        description="Pass as ?before= to get the next page; null on the last page."
    )


class StartedTaskOut(Answer):
    id: int
    type: TaskType
    status: TaskStatus
    error: str | None
    result: dict[str, Any] | None


class StepOut(Answer):
    id: int
    position: int
    name: str
    status: StepStatus
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    output_tail: str | None = Field(description="The kept end of a failed Job's output.")
    output_truncated: bool = Field(description="True when earlier output was cut.")
    notes: list[str]
    flow_run_id: str | None
    started_tasks: list[StartedTaskOut]


class StartedByOut(Answer):
    task_id: int
    task_type: TaskType
    step_id: int
    step_name: str


class TaskOut(TaskSummary):
    result: dict[str, Any] | None
    started_by: StartedByOut | None
    steps: list[StepOut]

    @classmethod
    def of_detail(cls, detail: TaskDetail) -> TaskOut:
        """The task with its steps, each with the tasks its actions started, and what started it."""
        steps = [
            {**dict(step), "started_tasks": detail.started_tasks.get(step.id, [])} for step in detail.steps
        ]
        return cls.model_validate({**dict(detail.task), "started_by": detail.started_by, "steps": steps})


# --- drivers -----------------------------------------------------------------------------------


class ApplicationOut(BaseModel):
    name: str
    default_version: str


class DriverVersionOut(BaseModel):
    name: str
    version: str
    description: str | None
    checksum: str = Field(description="sha256:HEX of the canonical tar: the same content, the same checksum.")
    application: ApplicationOut
    components: list[ComponentSummary]
    actions: list[ActionSummary]
    pushed_by: str
    pushed_at: datetime

    @classmethod
    def of(cls, row: DriverVersion) -> DriverVersionOut:
        spec = DriverSpec.model_validate(row.spec)
        return cls(
            name=row.name,
            version=row.version,
            description=spec.metadata.description,
            checksum=row.checksum,
            application=ApplicationOut(
                name=spec.spec.application.name, default_version=spec.spec.application.default_version
            ),
            components=[ComponentSummary.of(c) for c in spec.spec.components],
            actions=[ActionSummary.of(a) for a in spec.spec.actions],
            pushed_by=row.pushed_by,
            pushed_at=row.pushed_at,
        )


# --- agents ------------------------------------------------------------------------------------


class AgentCreateRequest(Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    cluster: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "local"


class AgentProcessOut(Answer):
    instance: str = Field(description="The process's name, as its flow runs' tags carry it in Prefect.")
    connected_at: datetime = Field(description="When it opened its presence connection (its latest).")
    seen_at: datetime = Field(description="When its server last noted it there (every 15 s).")
    running_tasks: list[int] = Field(description="The running tasks it claimed, oldest first.")


class AgentOut(Answer):
    name: str
    cluster: str
    created_at: datetime
    revoked: bool
    last_seen_at: datetime | None
    processes: list[AgentProcessOut] = Field(
        default=[],
        description="Its processes that hold a presence connection to a server now; empty in the answers "
        "that register an agent, issue its key or revoke it.",
    )
    state: AgentState = Field(
        description="`connected` while one of its processes is connected or it called in the last 60 s; "
        "`not-connected` if it called before; `never-connected`; `revoked`."
    )


class IssuedAgentKeyOut(BaseModel):
    agent: AgentOut
    key: str = Field(description="The agent's key; shown only now. Give it to `styrmin agent`.")


AGENT_INSTANCE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,63}$"
"""An agent's instance: letters, digits and ``:._-``, up to 64 (the agent's own are ``styrmin-agent:``
and 12 hex digits)."""


class ClaimRequest(Strict):
    lease_seconds: StrictInt = Field(default=60, ge=5, le=3600)
    wait_seconds: float = Field(
        default=0, ge=0, le=30, description="Wait up to this long for a task (long poll)."
    )
    started_by_actions_only: bool = Field(
        default=False,
        description="Claim only a task that an action started (an agent whose slots are all taken).",
    )
    plan_version: StrictInt | None = Field(
        default=None,
        ge=1,
        description="The agent's plan version (domain.plan.PLAN_VERSION): when it is the server's, the "
        "server starts the claimed task's first step and answers it as first_step.",
    )
    helm_lock_lease_seconds: StrictInt | None = Field(
        default=None,
        ge=5,
        le=3600,
        description="With plan_version: when the claimed task's first step is a Helm operation and no "
        "other task holds the release's Helm lock, the server takes it for the task with this lease "
        "and answers it as helm_lock.",
    )

    instance: str | None = Field(
        default=None,
        pattern=AGENT_INSTANCE_PATTERN,
        description="The agent's process that claims (its instance, as it names its presence "
        "connection): when that process goes away, the task ends failed at once.",
    )

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)


class ClaimOut(BaseModel):
    """A claimed task as the server answers it; the agent reads it as :class:`protocol.Claim`."""

    task: TaskSummary
    change_type: TaskType
    change: Change = Field(description="What the change asks for, with the target the server resolved.")
    deployment: DeploymentOut
    actions_token: str = Field(
        description="The styrmin-actions token of this reconciliation; revoked when it ends."
    )
    styrmin_url: str
    first_step: ClaimedStep | None = Field(
        default=None, description="The plan's first step, started with the claim (see plan_version)."
    )
    helm_lock: ClaimedHelmLock | None = Field(
        default=None,
        description="The release's Helm lock, taken for the task with the claim (see helm_lock_lease_seconds).",
    )


class StepCreateRequest(Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]


class StepRef(Answer):
    id: int
    task_id: int
    name: str
    status: StepStatus


class StepNoteRequest(Strict):
    note: Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class StepOutputRequest(Strict):
    output_tail: Annotated[str, StringConstraints(max_length=OUTPUT_TAIL_MAX_BYTES)]
    output_truncated: StrictBool


class StepFlowRunRequest(Strict):
    flow_run_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class StepEndRequest(Strict):
    error: Annotated[str, StringConstraints(min_length=1, max_length=65536)] | None = None


class TaskEndRequest(Strict):
    error: Annotated[str, StringConstraints(min_length=1, max_length=65536)] | None = None
    result: TaskResult | None = None
    components: list[ComponentStatus] | None = Field(
        default=None,
        max_length=100,
        description="The deployment's component workloads as the agent saw them at the task's end, "
        "recorded as PUT /agent/deployments/{name}/components records them; null: not reported here.",
    )
    last_step_id: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ID,
        description="The task's last step, which succeeded: it ends succeeded in the same call, just "
        "before a task that succeeds (instead of POST /agent/steps/{id}/end first). Only with no error.",
    )
    release_helm_locks: bool = Field(
        default=False,
        description="Let go of the Helm locks the task holds, in the same call (instead of POST "
        "/agent/tasks/{id}/helm-lock/release first): its Helm operations have ended.",
    )

    @model_validator(mode="after")
    def _last_step_only_on_success(self) -> TaskEndRequest:
        if self.error is not None and self.last_step_id is not None:
            raise ValueError(
                "last_step_id ends a step succeeded, so it comes only with a task that succeeds; for a "
                "failed task, end the failed step with its error first (POST /agent/steps/{id}/end)"
            )
        return self
