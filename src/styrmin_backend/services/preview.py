"""Previews: what a change would do, found by requesting it for real inside a savepoint that is rolled back.

A preview runs the very service call the change's request runs (so it meets the same checks and the
same refusals, in the same words), reads the change that call recorded as the agent would claim it,
and rolls it all back: nothing is recorded and the cluster is never reached. It then renders, with
Helm only and bounded like a push, what the deployment's last succeeded change applied and what this
change would apply, and compares them object by object with every secret concealed.

It comes in two phases so that no database transaction stays open while Helm renders:
:func:`plan_preview` inside a short transaction, :func:`render_preview` after it.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.domain.errors import DomainError
from styrmin_backend.domain.manifest_diff import ObjectDiff, conceal_configuration_pair, diff_manifests
from styrmin_backend.domain.plan import Plan, decide
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.roles import Role, role_refusal
from styrmin_backend.domain.secrets import secret_values
from styrmin_backend.domain.status import DeploymentStatus
from styrmin_backend.domain.tasks import TaskType
from styrmin_backend.drivers import (
    ComponentNotRendered,
    DeploymentConfiguration,
    DriverError,
    DriverSpec,
    RenderError,
    component_images,
    read_driver_archive,
    render_deployment,
)
from styrmin_backend.drivers.render import new_checksum_key
from styrmin_backend.drivers.workloads import find_workload, pod_template_of
from styrmin_backend.protocol import Change, change_facts, declared_actions
from styrmin_backend.services import history
from styrmin_backend.services.change_models import requested_of
from styrmin_backend.services.changes import Recorded, claimed_change
from styrmin_backend.services.drivers import DriverChecksBusy, driver_check_slot, get_driver_row, stored_spec
from styrmin_backend.services.principal import Principal
from styrmin_backend.store.db import hold_the_write_lock
from styrmin_backend.store.models import ChangeRow, DeploymentRow


@dataclass(frozen=True)
class Refusal:
    """The refusal the real request would meet: its HTTP status, message and field."""

    status: int
    message: str
    field: str | None

    @classmethod
    def of(cls, error: DomainError) -> Refusal:
        """The refusal of a domain error, as the API would answer it."""
        return cls(status=error.http_status, message=error.message, field=error.field)


@dataclass(frozen=True)
class Versions:
    """A driver version and an application version."""

    driver_version: str
    app_version: str


@dataclass(frozen=True)
class PlannedChange:
    """One change the request would record: its type and revision, what it moves the deployment to,
    and its plan (the steps its task will record, and the hook modes that will not run)."""

    type: TaskType
    revision: int
    change: Change
    plan: Plan


@dataclass(frozen=True)
class ComponentImages:
    """The images of a component's pod template before and after, as ``get_component_images`` sees
    them: the component container's first, overrides and ``{{ app.version }}`` resolved."""

    component: str
    before: list[str]
    after: list[str]


@dataclass(frozen=True)
class _RenderInput:
    archive: bytes
    spec: DriverSpec
    app_version: str
    configuration: dict[str, Any]
    is_upgrade: bool


@dataclass(frozen=True)
class Preview:
    """What a change would do. ``configuration_from``/``configuration_to`` and the diffs conceal every
    secret (shown as changed or unchanged); ``refusal`` is set when the request would be refused."""

    deployment: str
    namespace: str | None
    refusal: Refusal | None
    nothing_to_do: bool
    changes: list[PlannedChange]
    versions_from: Versions | None
    versions_to: Versions | None
    configuration_from: dict[str, Any] | None
    configuration_to: dict[str, Any] | None
    baseline_revision: int | None
    """The revision whose render the diff starts from: the deployment's last succeeded change."""
    objects: list[ObjectDiff] = field(default_factory=list)
    images: list[ComponentImages] = field(default_factory=list)
    render_error: str | None = None
    notes: list[str] = field(default_factory=list)
    _before: _RenderInput | None = None
    _after: _RenderInput | None = None


def _existing(session: Session, name: str) -> DeploymentRow | None:
    row = session.scalars(select(DeploymentRow).where(DeploymentRow.name == name)).one_or_none()
    if row is None or row.status == DeploymentStatus.DELETED:
        return None
    return row


def _render_input(
    session: Session, driver_name: str, version: Versions, configuration: dict[str, Any], *, is_upgrade: bool
) -> _RenderInput | None:
    try:
        row = get_driver_row(session, driver_name, version.driver_version)
    except DomainError:
        return None
    return _RenderInput(
        archive=bytes(row.archive),
        spec=stored_spec(row),
        app_version=version.app_version,
        configuration=dict(configuration),
        is_upgrade=is_upgrade,
    )


def plan_preview(
    session: Session,
    *,
    by: Principal,
    name: str,
    record: Callable[[], Sequence[Recorded]],
    needs: Role = Role.READ_WRITE,
    notes: Callable[[], list[str]] | None = None,
) -> Preview:
    """The changes ``record`` (the real request's service call, on ``session``) would record, read and
    then rolled back with everything else it wrote. Call :func:`render_preview` on the answer once the
    transaction has ended."""
    refusal_message = role_refusal(by.username, by.role, needs)
    refusal = Refusal(status=403, message=refusal_message, field=None) if refusal_message else None
    existing = _existing(session, name)
    namespace = existing.namespace if existing is not None else None
    baseline = history.last_applied(session, existing) if existing is not None else None
    versions_from = Versions(existing.driver_version, existing.app_version) if existing is not None else None
    configuration_from = dict(existing.configuration) if existing is not None else None
    before = (
        _render_input(
            session,
            baseline.driver_name,
            Versions(baseline.driver_version, baseline.app_version),
            baseline.configuration,
            is_upgrade=True,
        )
        if baseline is not None
        else None
    )
    planned: list[PlannedChange] = []
    driver_name: str | None = None
    extra: list[str] = []
    hold_the_write_lock(session)  # the savepoint's reads, then its writes, on one snapshot
    savepoint = session.begin_nested()
    try:
        for recorded in record():
            task = recorded.task
            if task is None or task.change_id is None:
                continue
            change_row = session.get(ChangeRow, task.change_id)
            assert change_row is not None
            task_type = TaskType(task.type)
            change = claimed_change(requested_of(change_row), recorded.deployment)
            # The plan of the driver version the change moves to, as the agent will run it.
            spec = stored_spec(
                get_driver_row(session, recorded.deployment.driver_name, change.target.driver_version)
            )
            plan = decide(change_facts(change), declared_actions(spec))
            planned.append(PlannedChange(task_type, task.revision or 0, change, plan))
            driver_name = recorded.deployment.driver_name
            namespace = recorded.deployment.namespace
        extra = notes() if notes is not None else []
    except DomainError as error:
        refusal = refusal or Refusal.of(error)
    finally:
        savepoint.rollback()
    after: _RenderInput | None = None
    versions_to: Versions | None = None
    configuration_to: dict[str, Any] | None = None
    if planned and driver_name is not None:
        target = planned[-1].change.target
        versions_to = Versions(target.driver_version, target.app_version)
        configuration_to = dict(target.configuration)
        after = _render_input(
            session,
            driver_name,
            versions_to,
            configuration_to,
            is_upgrade=planned[0].type is not TaskType.CREATE,
        )
    shown_from, shown_to = (None, None)
    if configuration_to is not None or configuration_from is not None:
        shown_from, shown_to = conceal_configuration_pair(
            configuration_from, configuration_to if configuration_to is not None else configuration_from or {}
        )
    return Preview(
        deployment=name,
        namespace=namespace,
        refusal=refusal,
        nothing_to_do=refusal is None and not planned,
        changes=planned,
        versions_from=versions_from,
        versions_to=versions_to if planned else versions_from,
        configuration_from=shown_from,
        configuration_to=shown_to if configuration_to is not None else shown_from,
        baseline_revision=baseline.revision if baseline is not None else None,
        notes=extra,
        _before=before,
        _after=after,
    )


def _render(
    source: _RenderInput, release_name: str, namespace: str, scratch: Path, checksum_key: bytes
) -> list[dict[str, Any]]:
    package = read_driver_archive(source.archive)
    folder = package.extract_to(scratch)
    return render_deployment(
        folder,
        source.spec,
        release_name,
        namespace,
        source.app_version,
        DeploymentConfiguration.model_validate(source.configuration),
        is_upgrade=source.is_upgrade,
        checksum_key=checksum_key,
    )


def _images_of(
    spec: DriverSpec, manifests: list[dict[str, Any]], release_name: str, source: _RenderInput
) -> dict[str, list[str]]:
    configuration = DeploymentConfiguration.model_validate(source.configuration)
    images: dict[str, list[str]] = {}
    for component in spec.spec.components:
        workload = find_workload(manifests, component, release_name)
        if workload is None:
            continue
        try:
            images[component.name] = component_images(
                spec,
                component.name,
                pod_template_of(copy.deepcopy(workload)),
                configuration,
                source.app_version,
            )
        except ComponentNotRendered:
            continue
    return images


def render_preview(preview: Preview) -> Preview:
    """``preview`` with the rendered diff and the components' images: the chart rendered by Helm in a
    process of its own (no driver code runs), in one of the server's driver check slots.

    Raises:
        DriverChecksBusy: when this server already runs its most driver checks and renders at once.
    """
    if preview.refusal is not None or preview._after is None:
        return preview
    namespace = preview.namespace or "default"
    name = preview.deployment
    # The server never holds a deployment's checksum key (its env Secret in the cluster does): both
    # renders share a key of this preview's own, so that the secret env checksums differ only where
    # a secret value does, and the diff shows them only as changed or unchanged.
    checksum_key = new_checksum_key()
    try:
        with driver_check_slot(), tempfile.TemporaryDirectory(prefix="styrmin-preview-") as scratch:
            before_manifests = (
                _render(preview._before, name, namespace, Path(scratch) / "before", checksum_key)
                if preview._before is not None
                else []
            )
            after_manifests = _render(preview._after, name, namespace, Path(scratch) / "after", checksum_key)
    except DriverChecksBusy:
        raise
    except (RenderError, DriverError, ValueError) as error:
        # Helm quotes the values it could not use: a secret one must not reach the user.
        said = redact(str(error), _secrets_of(preview))
        return replace(preview, render_error=f"The chart does not render for this change: {said}")
    before_images = (
        _images_of(preview._before.spec, before_manifests, name, preview._before)
        if preview._before is not None
        else {}
    )
    after_images = _images_of(preview._after.spec, after_manifests, name, preview._after)
    images = [
        ComponentImages(component=component, before=before_images.get(component, []), after=after)
        for component, after in after_images.items()
    ]
    objects = diff_manifests(before_manifests, after_manifests, secrets=_secrets_of(preview))
    return replace(preview, objects=objects, images=images)


def _secrets_of(preview: Preview) -> set[str]:
    """The secret values of the configurations a preview renders, wherever a chart puts them."""
    return {
        value
        for rendered in (preview._before, preview._after)
        if rendered is not None
        for value in secret_values(rendered.configuration)
    }
