"""The deployments list, creating a deployment, the deployment page and its changes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse
from markupsafe import Markup, escape
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from styrmin_backend.domain.errors import DomainError, NotFound
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import conceal_configuration
from styrmin_backend.domain.status import Status
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.services import changes, deployment_status, tasks
from styrmin_backend.services.deployment_models import Deployment
from styrmin_backend.web import _views
from styrmin_backend.web._common import (
    CONFIRMED_FIELD,
    CSRF_FIELD,
    EDIT_FIELD,
    HTMX_STOP_POLLING,
    Form,
    PolledPart,
    Viewer,
    WebForbidden,
    WebRoute,
    check_form,
    confirm_page,
    dry_run,
    is_confirmed,
    polled_answer,
    polled_part,
    prefect_ui_url,
    render,
    see_other,
    templates,
    text,
    unit,
    viewer_of,
    wants_to_edit,
)
from styrmin_backend.web._forms import (
    FormErrors,
    configuration_fields,
    env_field,
    image_field,
    place_error,
    read_configuration,
)
from styrmin_backend.web.pages.revisions import preview_for

router = APIRouter(route_class=WebRoute, include_in_schema=False)


# Where a service's error field goes on the UI's forms.
_CREATE_FIELDS = {
    "name": "name",
    "namespace": "namespace",
    "driver": "driver",
    "driver_version": "driver",
    "app_version": "app_version",
    "configuration.values": "values",
}
_UPGRADE_FIELDS = {"app_version": "app_version", "driver_version": "driver_version"}
_NOTICES = {"unchanged": "The deployment already runs these versions, so no task was started."}


@router.get("/deployments")
def deployments_page(request: Request, seen: str | None = None) -> Response:
    """The deployments list; its own polls (htmx, with ``seen``) get only the table, or 204."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        part = polled_part(
            "deployments-list",
            "/deployments",
            "_deployments_list.html",
            viewer=viewer,
            lines=_views.deployment_lines(session),
        )
        if seen is not None and request.headers.get("HX-Request") == "true":
            return polled_answer(request, viewer, part, seen)
        return render(request, "deployments.html", viewer, part=part)


def _driver_choices(session: Session) -> list[tuple[str, str, list[str]]]:
    """Every stored driver version as (value, label, components), newest push of each driver first."""
    return [
        (
            f"{view.row.name}@{view.row.version}",
            f"{view.row.name} {view.row.version} ({view.spec.spec.application.name} "
            f"{view.spec.spec.application.default_version})",
            [c.name for c in view.spec.spec.components],
        )
        for view in _views.driver_views(session)
    ]


def _render_create(
    request: Request,
    viewer: Viewer,
    session: Session,
    fields: dict[str, str],
    errors: FormErrors,
    status_code: int = 200,
) -> HTMLResponse:
    choices = _driver_choices(session)
    chosen = fields.get("driver") or (choices[0][0] if choices else "")
    components = next((c for value, _, c in choices if value == chosen), [])
    return render(
        request,
        "deployment_new.html",
        viewer,
        status_code,
        choices=choices,
        chosen=chosen,
        components=components,
        fields=fields,
        errors=errors,
        image_field=image_field,
        env_field=env_field,
    )


@router.get("/new-deployment")
def create_page(request: Request, driver: str = "") -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        if not viewer.can_write:
            raise WebForbidden(f"Creating a deployment needs {Role.READ_WRITE.label}.", viewer)
        return _render_create(
            request, viewer, session, {"driver": driver, "namespace": "default"}, FormErrors()
        )


@router.get("/new-deployment/components")
def create_components_fragment(request: Request, driver: str = "") -> HTMLResponse:
    """The image and env fields of the chosen driver's components (swapped in when the driver changes)."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        components = next((c for value, _, c in _driver_choices(session) if value == driver), [])
        # What was typed for a component that the chosen driver also has is kept.
        typed = {k: v for k, v in request.query_params.items() if k.startswith(("image.", "env."))}
        return render(
            request,
            "_component_fields.html",
            viewer,
            components=components,
            fields=typed,
            errors=FormErrors(),
            image_field=image_field,
            env_field=env_field,
        )


@router.post("/new-deployment")
def create_deployment(request: Request, form: Form) -> Response:
    """Review a new deployment (what it will record and the objects its chart makes), then create it."""
    fields = {
        key: value
        for key, value in form.items()
        if isinstance(value, str) and key not in (CSRF_FIELD, CONFIRMED_FIELD, EDIT_FIELD)
    }
    errors = FormErrors()
    confirmed = is_confirmed(form)
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        if wants_to_edit(form):
            return _render_create(request, viewer, session, fields, errors)
        driver_name, _, driver_version = text(form, "driver").partition("@")
        components = next(
            (c for value, _, c in _driver_choices(session) if value == text(form, "driver")), []
        )
        if not driver_name or not driver_version:
            errors.add("driver", "Choose a driver version; push one first with `styrminctl drivers push`.")
        if not text(form, "name").strip():
            errors.add("name", "Give the deployment a name.")
        if not text(form, "namespace").strip():
            errors.add("namespace", "Give the namespace to deploy into.")
        configuration = read_configuration(form, components, errors)
        if errors:
            return _render_create(request, viewer, session, fields, errors, 422)
    name = text(form, "name").strip()
    namespace = text(form, "namespace").strip()
    app_version = text(form, "app_version").strip() or None

    def record(session: Session) -> changes.Recorded:
        return changes.create_deployment(
            session,
            by=viewer.principal,
            name=name,
            namespace=namespace,
            driver_name=driver_name,
            driver_version=driver_version,
            app_version=app_version,
            configuration=configuration,
        )

    with (unit if confirmed else dry_run)(request) as session:
        try:
            record(session)
        except DomainError as error:
            session.rollback()
            place_error(error, errors, _CREATE_FIELDS)
            return _render_create(request, viewer, session, fields, errors, 422)
    if confirmed:
        return see_other(f"/deployments/{name}")
    shown = preview_for(request, viewer, name, lambda session: [record(session)])
    return confirm_page(
        request,
        viewer,
        preview=shown,
        title=f'Create deployment "{name}"?',
        lines=[
            f"Driver: {driver_name} {driver_version}, into namespace {namespace}.",
            "This records revision 1 and runs the driver's setup hooks around the chart's install.",
        ],
        action="/new-deployment",
        hidden=fields,
        button="Create deployment",
        edit="Change",
        cancel="/deployments",
    )


def _latest_task(history: tasks.TaskPage, prefect_url: str, session: Session) -> _views.TaskView | None:
    """The newest change's task: tasks that actions started are shown under their hook step instead."""
    if not history.items:
        return None
    latest = next((t for t in history.items if t.parent_task_id is None), history.items[0])
    return _views.load_task_view(session, latest.id, prefect_url)


def _deployment_state(viewer: Viewer, session: Session, row: Deployment, status: Status) -> PolledPart:
    """The deployment's status, facts and components, which its page polls."""
    spec = _views.DriverCache(session).spec(row.driver_name, row.driver_version)
    rendered = _views.rendered_for(session, row)
    return polled_part(
        "deployment-state",
        f"/deployments/{row.name}/state",
        "_deployment_state.html",
        viewer=viewer,
        deployment=row,
        deployment_status=status,
        spec=spec,
        components=_views.component_views(row, spec, rendered),
        rendered=rendered,
    )


@router.get("/deployments/{name}")
def deployment_page(
    request: Request,
    name: str,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    notice: str = "",
) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        row = changes.read_deployment(session, name)
        status = deployment_status.status_of(session, row)
        history = tasks.list_tasks(session, deployment=name, limit=_views.HISTORY_PAGE_SIZE, before=before)
        return render(
            request,
            "deployment.html",
            viewer,
            deployment=row,
            name=row.name,
            deployment_status=status,
            state=_deployment_state(viewer, session, row, status),
            values=_views.masked_values(row),
            latest=_latest_task(
                history if before is None else tasks.list_tasks(session, deployment=name, limit=20),
                prefect_ui_url(request),
                session,
            ),
            history=history,
            history_part=_history_part(viewer, name, history) if before is None else None,
            before=before,
            notice=_NOTICES.get(notice, ""),
        )


@router.get("/deployments/{name}/state")
def deployment_state_fragment(request: Request, name: str, seen: str = "") -> Response:
    """The deployment's facts and components, polled by its page: 204 while nothing shown changed.

    Once the deployment is deleted, answers 286, which tells htmx to show that and stop polling.
    """
    with unit(request) as session:
        viewer = viewer_of(request, session)
        try:
            row = changes.read_deployment(session, name)
        except NotFound:
            return HTMLResponse(
                '<div id="deployment-state"><div class="alert alert-info" role="status">'
                f"<p>Deployment {escape(name)} has been deleted.</p></div></div>",
                status_code=HTMX_STOP_POLLING,
            )
        status = deployment_status.status_of(session, row)
        heading = Markup(  # noqa: S704 (an autoescaped template)
            templates.get_template("_deployment_status.html").render(deployment_status=status, oob=True)
        )
        part = _deployment_state(viewer, session, row, status)
        return polled_answer(request, viewer, part, seen, oob=heading)


def _history_part(viewer: Viewer, name: str, history: tasks.TaskPage) -> PolledPart:
    """The first page of the task history, polled every second: each row follows its task's state."""
    return polled_part(
        "history",
        f"/deployments/{name}/history",
        "_history.html",
        seconds=1,
        viewer=viewer,
        name=name,
        history=history,
        before=None,
    )


@router.get("/deployments/{name}/history")
def history_fragment(request: Request, name: str, seen: str = "") -> Response:
    """The first page of the task history, polled by the deployment page: 204 while nothing shown changed,
    286 (stop polling) once the deployment is deleted."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        try:
            changes.read_deployment(session, name)
        except NotFound:
            deleted = True  # its history stays as it ends; polling a 404 every second helped no one
        else:
            deleted = False
        history = tasks.list_tasks(session, deployment=name, limit=_views.HISTORY_PAGE_SIZE)
        part = _history_part(viewer, name, history)
        if deleted:  # the history as it ended, in an element that polls no more
            return HTMLResponse(
                f'<div id="{part.element_id}">{part.body}</div>', status_code=HTMX_STOP_POLLING
            )
        return polled_answer(request, viewer, part, seen)


def _render_upgrade(
    request: Request,
    viewer: Viewer,
    session: Session,
    name: str,
    fields: dict[str, str],
    errors: FormErrors,
    status_code: int = 200,
) -> HTMLResponse:
    row = changes.read_deployment(session, name)
    return render(
        request,
        "upgrade.html",
        viewer,
        status_code,
        deployment=row,
        versions=_views.driver_versions(session, row.driver_name),
        fields=fields,
        errors=errors,
    )


@router.get("/deployments/{name}/upgrade")
def upgrade_page(request: Request, name: str) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        if not viewer.can_write:
            raise WebForbidden(f"Upgrading a deployment needs {Role.READ_WRITE.label}.", viewer)
        row = changes.read_deployment(session, name)
        fields = {"app_version": row.app_version, "driver_version": row.driver_version}
        return _render_upgrade(request, viewer, session, name, fields, FormErrors())


@router.post("/deployments/{name}/upgrade")
def upgrade(request: Request, name: str, form: Form) -> Response:
    fields = {
        "app_version": text(form, "app_version").strip(),
        "driver_version": text(form, "driver_version"),
    }
    errors = FormErrors()
    confirmed = is_confirmed(form)
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        before = changes.read_deployment(session, name)
        was = (before.app_version, before.driver_name, before.driver_version)
    runner = unit if confirmed else dry_run
    with runner(request) as session:
        try:
            recorded = changes.upgrade_deployment(
                session,
                name,
                by=viewer.principal,
                app_version=fields["app_version"] or None,
                driver_version=fields["driver_version"] or None,
            )
        except DomainError as error:
            place_error(error, errors, _UPGRADE_FIELDS)
            session.rollback()
            return _render_upgrade(request, viewer, session, name, fields, errors, 422)
        if recorded.task is None:
            return see_other(f"/deployments/{name}?notice=unchanged")
        revision = recorded.task.revision
    if confirmed:
        return see_other(f"/deployments/{name}")
    shown = preview_for(
        request,
        viewer,
        name,
        lambda session: [
            changes.upgrade_deployment(
                session,
                name,
                by=viewer.principal,
                app_version=fields["app_version"] or None,
                driver_version=fields["driver_version"] or None,
            )
        ],
    )
    return confirm_page(
        request,
        viewer,
        preview=shown,
        title=f'Upgrade deployment "{name}"?',
        lines=[
            f"Application version: {was[0]} → {fields['app_version'] or was[0]}",
            f"Driver: {was[1]} {was[2]} → {fields['driver_version'] or was[2]}",
            f"This records revision {revision} and runs the driver's upgrade hooks.",
        ],
        action=f"/deployments/{name}/upgrade",
        hidden=fields,
        button="Upgrade",
        cancel=f"/deployments/{name}",
    )


def _components_of(session: Session, name: str) -> list[str]:
    row = changes.read_deployment(session, name)
    spec = _views.DriverCache(session).spec(row.driver_name, row.driver_version)
    return [c.name for c in spec.spec.components] if spec else []


def _render_configure(
    request: Request,
    viewer: Viewer,
    session: Session,
    name: str,
    fields: dict[str, str],
    errors: FormErrors,
    status_code: int = 200,
) -> HTMLResponse:
    return render(
        request,
        "configure.html",
        viewer,
        status_code,
        deployment=changes.read_deployment(session, name),
        components=_components_of(session, name),
        fields=fields,
        errors=errors,
        image_field=image_field,
        env_field=env_field,
    )


@router.get("/deployments/{name}/configure")
def configure_page(request: Request, name: str) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        if not viewer.can_write:
            raise WebForbidden(
                f"Changing a deployment's configuration needs {Role.READ_WRITE.label}.", viewer
            )
        row = changes.read_deployment(session, name)
        fields = configuration_fields(
            DeploymentConfiguration.model_validate(conceal_configuration(row.configuration)),
            _components_of(session, name),
        )
        return _render_configure(request, viewer, session, name, fields, FormErrors())


@router.post("/deployments/{name}/configure")
def configure(request: Request, name: str, form: Form) -> Response:
    fields = {key: value for key, value in form.items() if isinstance(value, str)}
    fields.pop(CSRF_FIELD, None)
    fields.pop(CONFIRMED_FIELD, None)
    errors = FormErrors()
    confirmed = is_confirmed(form)
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        configuration = read_configuration(form, _components_of(session, name), errors)
        if errors:
            return _render_configure(request, viewer, session, name, fields, errors, 422)
    runner = unit if confirmed else dry_run
    with runner(request) as session:
        try:
            recorded = changes.configure_deployment(
                session, name, by=viewer.principal, configuration=configuration
            )
        except DomainError as error:
            session.rollback()
            place_error(error, errors, {"configuration.values": "values"})
            return _render_configure(request, viewer, session, name, fields, errors, 422)
        revision = recorded.task.revision if recorded.task else None
    if confirmed:
        return see_other(f"/deployments/{name}")
    shown = preview_for(
        request,
        viewer,
        name,
        lambda session: [
            changes.configure_deployment(session, name, by=viewer.principal, configuration=configuration)
        ],
    )
    return confirm_page(
        request,
        viewer,
        preview=shown,
        title=f'Change the configuration of "{name}"?',
        lines=[
            f"This replaces the values, image overrides and env vars, and records revision {revision}.",
            "Workloads whose configuration changes are rolled out again.",
        ],
        action=f"/deployments/{name}/configure",
        hidden=fields,
        button="Change configuration",
        cancel=f"/deployments/{name}",
    )


def _set_running(request: Request, name: str, form: FormData, running: bool) -> Response:
    verb = "start" if running else "stop"
    component = text(form, "component")
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
    confirmed = is_confirmed(form)
    with (unit if confirmed else dry_run)(request) as session:
        changes.set_components_running(
            session, name, by=viewer.principal, components=[component], running=running
        )
    if confirmed:
        return see_other(f"/deployments/{name}")
    effect = (
        "Its workload is scaled back to its configured replicas."
        if running
        else "Its workload is scaled to zero until you start it again."
    )
    return confirm_page(
        request,
        viewer,
        title=f'{verb.capitalize()} component "{component}" of "{name}"?',
        lines=[effect],
        action=f"/deployments/{name}/{verb}",
        hidden={"component": component},
        button=f"{verb.capitalize()} {component}",
        cancel=f"/deployments/{name}",
        danger=not running,
    )


@router.post("/deployments/{name}/stop")
def stop(request: Request, name: str, form: Form) -> Response:
    return _set_running(request, name, form, running=False)


@router.post("/deployments/{name}/start")
def start(request: Request, name: str, form: Form) -> Response:
    return _set_running(request, name, form, running=True)


@router.post("/deployments/{name}/delete")
def delete(request: Request, name: str, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
    if is_confirmed(form):
        with unit(request) as session:
            changes.delete_deployment(session, name, by=viewer.principal)
        return see_other(f"/deployments/{name}")
    with dry_run(request) as session:
        row = changes.read_deployment(session, name)
        namespace = row.namespace
    return confirm_page(
        request,
        viewer,
        title=f'Delete deployment "{name}"?',
        lines=[
            f"The agent uninstalls it from namespace {namespace}; its workloads and their data go with it.",
            "Its tasks stay readable.",
        ],
        action=f"/deployments/{name}/delete",
        button=f"Delete {name}",
        cancel=f"/deployments/{name}",
        danger=True,
    )
