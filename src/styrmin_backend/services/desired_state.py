"""Moving a deployment to a stated state: ``apply`` (a file saying what it should be) and rollback
(what an earlier revision asked for). Both request the change that gets there through the same
service calls a create, upgrade, configure, stop or start request makes, so they meet the same checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.domain.deployments import check_namespace
from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.domain.secrets import keep_concealed_configuration
from styrmin_backend.domain.status import DeploymentStatus
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.services import changes, history
from styrmin_backend.services.drivers import get_driver_info
from styrmin_backend.services.principal import Principal
from styrmin_backend.store.models import DeploymentRow


class Outcome(StrEnum):
    """What applying a desired state did."""

    CREATED = "created"
    CHANGED = "changed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class DesiredDeployment:
    """What a deployment should be: the fields of an ``apply`` file. ``app_version`` None: the
    driver's default on create, the current one otherwise; ``stopped_components`` None: as it is."""

    name: str
    driver_name: str
    driver_version: str
    namespace: str | None = None
    cluster: str | None = None
    app_version: str | None = None
    configuration: DeploymentConfiguration = field(default_factory=DeploymentConfiguration)
    stopped_components: list[str] | None = None


@dataclass(frozen=True)
class Moved:
    """The changes recorded to reach a state (none when the deployment already asks for it)."""

    outcome: Outcome
    recorded: list[changes.Recorded]


def _normalised(configuration: dict[str, Any]) -> dict[str, Any]:
    return DeploymentConfiguration.model_validate(configuration).model_dump(mode="json")


def _existing(session: Session, name: str) -> DeploymentRow | None:
    row = session.scalars(select(DeploymentRow).where(DeploymentRow.name == name)).one_or_none()
    if row is None or row.status == DeploymentStatus.DELETED:
        return None
    return row


def move_deployment(
    session: Session,
    deployment: DeploymentRow,
    *,
    by: Principal,
    driver_version: str,
    app_version: str,
    configuration: dict[str, Any],
    stopped_components: list[str] | None,
) -> list[changes.Recorded]:
    """Record the change that makes ``deployment`` ask for these versions, configuration and stopped
    components: an upgrade when a version differs (it carries the configuration and runs the upgrade
    hooks), else a configuration change, else a stop and/or start; nothing when it already asks for
    them."""
    name = deployment.name
    # A configuration read concealed (`deployments get -o yaml`) keeps the stored secrets it shows as set.
    wanted = _normalised(keep_concealed_configuration(configuration, deployment.configuration))
    current = _normalised(deployment.configuration)
    stopped_now = sorted(deployment.stopped_components)
    stopped = stopped_now if stopped_components is None else sorted(set(stopped_components))
    recorded: list[changes.Recorded] = []
    if (driver_version, app_version) != (deployment.driver_version, deployment.app_version):
        # The upgrade records the deployment's configuration and the agent applies its stopped
        # components at zero: set both first, so that one change gets the deployment there.
        deployment.configuration = wanted
        _check_components(session, deployment, driver_version, stopped)
        deployment.stopped_components = stopped
        upgrade = changes.upgrade_deployment(
            session, name, by=by, app_version=app_version, driver_version=driver_version
        )
        if upgrade.task is not None:
            return [upgrade]
        deployment.configuration = current
        deployment.stopped_components = stopped_now
    if wanted != current:
        _check_components(session, deployment, deployment.driver_version, stopped)
        deployment.stopped_components = stopped
        configuration_model = DeploymentConfiguration.model_validate(wanted)
        return [changes.configure_deployment(session, name, by=by, configuration=configuration_model)]
    to_stop = sorted(set(stopped) - set(stopped_now))
    to_start = sorted(set(stopped_now) - set(stopped))
    if to_stop:
        recorded.append(
            changes.set_components_running(session, name, by=by, components=to_stop, running=False)
        )
    if to_start:
        recorded.append(
            changes.set_components_running(session, name, by=by, components=to_start, running=True)
        )
    return recorded


def _check_components(
    session: Session, deployment: DeploymentRow, driver_version: str, stopped: list[str]
) -> None:
    if not stopped:
        return
    driver = get_driver_info(session, deployment.driver_name, driver_version)
    unknown = [c for c in stopped if c not in driver.components]
    if unknown:
        raise InvalidInput(
            f"stopped_components: driver {driver.name}@{driver.version} has no component "
            f"{', '.join(repr(c) for c in unknown)}; its components are {', '.join(driver.components)}.",
            field="stopped_components",
        )


def apply_deployment(session: Session, desired: DesiredDeployment, *, by: Principal) -> Moved:
    """Create the deployment ``desired`` describes, or record the change that makes it so, or nothing."""
    existing = _existing(session, desired.name)
    if existing is None:
        created = changes.create_deployment(
            session,
            by=by,
            name=desired.name,
            namespace=desired.namespace or desired.name,
            driver_name=desired.driver_name,
            driver_version=desired.driver_version,
            app_version=desired.app_version,
            configuration=desired.configuration,
            cluster=desired.cluster or "local",
        )
        recorded = [created]
        if desired.stopped_components:
            recorded.append(
                changes.set_components_running(
                    session, desired.name, by=by, components=desired.stopped_components, running=False
                )
            )
        return Moved(Outcome.CREATED, recorded)
    _check_unchangeable(existing, desired)
    recorded = move_deployment(
        session,
        existing,
        by=by,
        driver_version=desired.driver_version,
        app_version=desired.app_version or existing.app_version,
        configuration=desired.configuration.model_dump(mode="json"),
        stopped_components=desired.stopped_components,
    )
    return Moved(Outcome.CHANGED if recorded else Outcome.UNCHANGED, recorded)


def _check_unchangeable(existing: DeploymentRow, desired: DesiredDeployment) -> None:
    """A deployment keeps its driver, namespace and cluster: a file saying others is refused."""
    for field_name, have, want in (
        ("driver", existing.driver_name, desired.driver_name),
        ("namespace", existing.namespace, desired.namespace),
        ("cluster", existing.cluster, desired.cluster),
    ):
        if want is not None and want != have:
            if field_name == "namespace":
                check_namespace(want)
            raise InvalidInput(
                f'{field_name}: deployment "{existing.name}" has {field_name} "{have}", not "{want}"; a '
                f"deployment keeps its {field_name}. Write {have}, or apply under another name.",
                field=field_name,
            )


@dataclass(frozen=True)
class RolledBack:
    """A rollback's change(s), the revision it brings back, and the backup to restore when the
    driver refuses to go back to that revision's versions."""

    revision: history.Revision
    recorded: list[changes.Recorded]
    backup: history.BackupBefore | None


def rollback_deployment(session: Session, name: str, to_revision: int, *, by: Principal) -> RolledBack:
    """Record the change that brings back revision ``to_revision``'s driver version, application
    version and configuration; the upgrade hooks run when a version changes, as in any upgrade."""
    deployment = changes.get_deployment(session, name)
    target = history.get_revision(session, name, to_revision)
    recorded = move_deployment(
        session,
        deployment,
        by=by,
        driver_version=target.driver_version,
        app_version=target.app_version,
        configuration=target.configuration,
        stopped_components=None,
    )
    return RolledBack(
        revision=target, recorded=recorded, backup=history.backup_at_versions(session, deployment, target)
    )
