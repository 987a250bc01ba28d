"""The synchronous client: ``styrmin.Client``."""

from __future__ import annotations

import builtins
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from styrmin import _calls as calls
from styrmin import _change_calls as change_calls
from styrmin._calls import ConfigurationLike, DriverSource
from styrmin._http import (
    API_PREFIX,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    Call,
    Retrying,
    build_headers,
    connection_error,
    next_page,
    read,
    resolve_retry_seconds,
    resolve_token,
    resolve_url,
)
from styrmin._wait import WaitState
from styrmin.errors import StyrminError
from styrmin.models import (
    Agent,
    AgentKey,
    Applied,
    Backup,
    BackupChange,
    BackupLocation,
    BackupSchedule,
    Change,
    ClusterBackupLocation,
    Configuration,
    Deployment,
    DeploymentStatus,
    Driver,
    DriverPush,
    DriverReport,
    IssuedToken,
    PasswordReset,
    Preview,
    Revision,
    Role,
    Rollback,
    Task,
    TaskLogs,
    TaskPage,
    TaskStatus,
    TaskSummary,
    TaskType,
    User,
    WhoAmI,
)

T = TypeVar("T")
ProgressCallback = Callable[[Task], None]


class Client:
    """A client of the Styrmin API.

    ``url`` defaults to ``STYRMIN_URL`` and ``token`` to ``STYRMIN_TOKEN``. Reads (GET) and the
    idempotent writes (stopping, starting components, upgrading to a version) are retried on
    connection errors and 502/503/504 for ``retry_seconds`` (default ``STYRMIN_RETRY_SECONDS``, else
    90 s; at most ``retries`` times when given), with backoff and jitter; other writes are never
    retried. Errors the server answers raise :class:`styrmin.errors.APIError` subclasses carrying its
    message and status.

    >>> with Client("http://127.0.0.1:8080", token="...") as client:  # doctest: +SKIP
    ...     change = client.deployments.upgrade("shop", app_version="2.0")
    ...     task = client.tasks.wait(change.task.id, on_progress=print)
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | None = DEFAULT_RETRIES,
        retry_seconds: float | None = None,
        verify: bool | str | ssl.SSLContext = True,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.token = resolve_token(token)
        self.retries = None if retries is None else max(0, retries)
        self.retry_seconds = resolve_retry_seconds(retry_seconds)
        self._headers = dict(headers or {})
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX, timeout=timeout, verify=verify, transport=transport
        )
        self.drivers = Drivers(self)
        self.deployments = Deployments(self)
        self.tasks = Tasks(self)
        self.users = Users(self)
        self.agents = Agents(self)
        self.steps = Steps(self)
        self.backups = Backups(self)

    def __repr__(self) -> str:
        return f"Client(url={self.url!r}, token={'set' if self.token else None})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one call; reads and idempotent writes are retried on connection errors and 502/503/504
        for ``retry_seconds``. A paged list is read to its end, page by page."""
        result, response = self._send_once(call)
        following = next_page(call, response)
        while following is not None:
            more, response = self._send_once(following)
            result = [*result, *more]  # type: ignore[assignment,misc]
            following = next_page(following, response)
        return result

    def _send_once(self, call: Call[T]) -> tuple[T, httpx.Response]:
        retrying = Retrying(call, self.url, self.retry_seconds, self.retries)
        while True:
            retrying.attempt += 1
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    content=call.content,
                    headers=build_headers(self.token, {**self._headers, **call.headers}),
                )
            except httpx.TransportError as error:
                delay = retrying.delay_after(error, None)
                if delay is None:
                    raise retrying.gave_up(connection_error(self.url, error)) from error
                time.sleep(delay)
                continue
            delay = retrying.delay_after(None, response)
            if delay is not None:
                time.sleep(delay)
                continue
            try:
                return read(call, response, self.url), response
            except StyrminError as error:
                raise retrying.gave_up(error) from None

    # --- auth ----------------------------------------------------------------------------------

    def login(
        self,
        username: str,
        password: str,
        *,
        token_name: str | None = None,
        expires_in_seconds: int | None = None,
    ) -> IssuedToken:
        """Log in with a password; the client uses the new token from now on."""
        issued = self.send(calls.login(username, password, token_name, expires_in_seconds))
        self.token = issued.token
        return issued

    def logout(self) -> None:
        """Revoke the client's token on the server; the client has no token afterwards."""
        self.send(calls.logout())
        self.token = None

    def whoami(self) -> WhoAmI:
        """The user the client's token belongs to."""
        return self.send(calls.whoami())


class Drivers:
    """Drivers: push, list, get, validate, download."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def push(self, source: DriverSource) -> DriverPush:
        """Push a driver folder, ``.tar.gz`` file or bytes; ``created`` is False for an identical re-push.

        Raises:
            ValidationError: the driver is invalid; ``errors`` lists every problem.
            ConflictError: this name and version are stored with other content.
        """
        return self._client.send(calls.push_driver(calls.driver_archive(source)))

    def validate(self, source: DriverSource) -> DriverReport:
        """Validate a driver on the server without storing it; the report lists every problem."""
        return self._client.send(calls.validate_driver(calls.driver_archive(source)))

    def list(self, name: str | None = None) -> builtins.list[Driver]:
        """Every stored driver version, by name and then as pushed (only ``name``'s versions when given)."""
        return self._client.send(calls.list_drivers(name))

    def get(self, name: str, version: str) -> Driver:
        """One driver version."""
        return self._client.send(calls.get_driver(name, version))

    def download(self, name: str, version: str) -> bytes:
        """The driver version's ``.tar.gz`` as stored."""
        return self._client.send(calls.download_driver(name, version))


class Deployments:
    """Deployments and their changes; each change answers the deployment and the task carrying it out."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(
        self,
        *,
        status: DeploymentStatus | str | None = None,
        driver: str | None = None,
        cluster: str | None = None,
    ) -> builtins.list[Deployment]:
        """Every deployment by name, or those with the ``status``, ``driver`` and ``cluster`` given."""
        return self._client.send(
            calls.list_deployments(None if status is None else str(status), driver, cluster)
        )

    def get(self, name: str) -> Deployment:
        """One deployment."""
        return self._client.send(calls.get_deployment(name))

    def create(
        self,
        name: str,
        *,
        namespace: str,
        driver: str,
        driver_version: str,
        app_version: str | None = None,
        configuration: ConfigurationLike | None = None,
        cluster: str | None = None,
    ) -> Change:
        """Create a deployment (app_version defaults to the driver's application version; cluster to the
        server's default)."""
        return self._client.send(
            calls.create_deployment(
                name, namespace, driver, driver_version, app_version, configuration, cluster
            )
        )

    def upgrade(
        self,
        name: str,
        *,
        app_version: str | None = None,
        driver_version: str | None = None,
        started_by_step: int | None = None,
    ) -> Change:
        """Upgrade the application and/or driver version; ``task`` is None when nothing changes.

        ``started_by_step`` links the new task to the hook step of the action asking for it (only
        Styrmin's actions may: pass ``context.hook_step_id``).
        """
        return self._client.send(calls.upgrade_deployment(name, app_version, driver_version, started_by_step))

    def configure(self, name: str, configuration: ConfigurationLike) -> Change:
        """Replace the deployment's configuration (values, images, env)."""
        return self._client.send(calls.configure_deployment(name, configuration))

    def stop(self, name: str, components: Sequence[str], *, started_by_step: int | None = None) -> Change:
        """Stop components (scale their workloads to zero)."""
        return self._client.send(calls.set_components(name, components, False, started_by_step))

    def start(self, name: str, components: Sequence[str], *, started_by_step: int | None = None) -> Change:
        """Start components again."""
        return self._client.send(calls.set_components(name, components, True, started_by_step))

    def restore(self, name: str, backup_id: int, *, from_deployment: str | None = None) -> Change:
        """Restore backup ``backup_id``: the application goes back to the backup's version, then the
        driver's restore hook brings its data back. A backup of another deployment is refused unless
        ``from_deployment`` names that deployment (its data, configuration and secrets replace these)."""
        return self._client.send(calls.restore_deployment(name, backup_id, from_deployment))

    def delete(self, name: str) -> Change:
        """Delete the deployment (the agent uninstalls it)."""
        return self._client.send(calls.delete_deployment(name))

    def preview(self, name: str, change: str, **fields: Any) -> Preview:
        """What a change would do, without recording it: ``change`` is create, upgrade, configure,
        rollback or apply, ``fields`` that change's request fields (``app_version="2.0.0"``,
        ``to_revision=3``, ...). The answer's ``refusal`` says what the real request would meet."""
        return self._client.send(change_calls.preview(name, change_calls.preview_body(change, **fields)))

    def history(self, name: str) -> builtins.list[Revision]:
        """The deployment's revisions, newest first (configurations with secrets concealed)."""
        return self._client.send(change_calls.list_revisions(name))

    def revision(self, name: str, revision: int) -> Revision:
        """One revision of the deployment."""
        return self._client.send(change_calls.get_revision(name, revision))

    def rollback(self, name: str, to_revision: int) -> Rollback:
        """Request the change that brings back revision ``to_revision``'s versions and configuration."""
        return self._client.send(change_calls.rollback(name, to_revision))

    def apply(
        self,
        name: str,
        *,
        driver: str,
        driver_version: str,
        namespace: str | None = None,
        cluster: str | None = None,
        app_version: str | None = None,
        configuration: ConfigurationLike | None = None,
        stopped_components: Sequence[str] | None = None,
    ) -> Applied:
        """Make deployment ``name`` what the arguments say: create it, or request the change that gets
        it there, or nothing (``outcome`` "unchanged"). Preview it with ``preview(name, "apply", ...)``."""
        stopped = builtins.list(stopped_components) if stopped_components is not None else None
        body = change_calls.desired_body(
            driver, driver_version, namespace, cluster, app_version, configuration, stopped
        )
        return self._client.send(change_calls.apply(name, body))


class Tasks:
    """Tasks: list, get, and wait until one ends."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def logs(
        self, task_id: int, *, step: int | None = None, offset: int = 0, limit: int | None = None
    ) -> TaskLogs:
        """A page of the log lines of the task's actions (read from Prefect by the server) and the stored
        output of their commands; pass ``next_offset`` as ``offset`` for the lines that follow."""
        return self._client.send(change_calls.task_logs(task_id, step, offset, limit))

    def list(
        self,
        *,
        deployment: str | None = None,
        type: TaskType | str | None = None,
        status: TaskStatus | str | None = None,
        limit: int | None = None,
        before: int | None = None,
    ) -> TaskPage:
        """One page of tasks, newest first; pass ``page.next_before`` as ``before`` for the next."""
        return self._client.send(calls.list_tasks(deployment, type, status, limit, before))

    def iter(
        self,
        *,
        deployment: str | None = None,
        type: TaskType | str | None = None,
        status: TaskStatus | str | None = None,
        page_size: int = 100,
    ) -> Iterator[TaskSummary]:
        """Every matching task, newest first, fetching pages as needed."""
        before: int | None = None
        while True:
            page = self.list(deployment=deployment, type=type, status=status, limit=page_size, before=before)
            yield from page.items
            if page.next_before is None:
                return
            before = page.next_before

    def get(self, task_id: int, *, wait_until_end: float = 0) -> Task:
        """One task with its steps, result and origin.

        With ``wait_until_end`` (seconds, at most 60; keep it below the client's timeout), the server
        answers once the task has ended or that time has passed, whichever comes first: a long poll.
        """
        return self._client.send(calls.get_task(task_id, wait_until_end))

    def retry(self, task_id: int) -> Change:
        """Request failed task ``task_id``'s change again; the answer's ``task`` is the new task.

        Only the latest task of its type for its deployment can be retried (ConflictError otherwise).
        """
        return self._client.send(calls.retry_task(task_id))

    def cancel(self, task_id: int) -> Task:
        """Cancel pending or running task ``task_id``; the answer is the task, ended as cancelled.

        A running task's action is stopped and the tasks its actions started are cancelled too; the
        cluster is left as it is. ConflictError once the task has ended.
        """
        return self._client.send(calls.cancel_task(task_id))

    def configuration(self, task_id: int) -> Configuration:
        """The configuration the task's change applies, secret values included.

        Only the actions of that task may read it, with their own token; every other caller reads a
        deployment's configuration, where secret values are shown only as set.
        """
        return self._client.send(calls.get_task_configuration(task_id))

    def wait(
        self,
        task_id: int,
        *,
        on_progress: ProgressCallback | None = None,
        interval: float = 1.0,
        timeout: float | None = None,
        raise_on_failure: bool = False,
    ) -> Task:
        """Poll the task until it ends and return it; ``on_progress`` gets it first and at every change.

        Without ``on_progress``, each read waits on the server until the task ends (a long poll),
        so the end is seen at once; with it, the task is read every ``interval`` seconds.

        Raises:
            WaitTimeoutError: it has not ended after ``timeout`` seconds.
            TaskFailedError: it failed, when ``raise_on_failure`` is True.
        """
        state = WaitState(task_id, interval, timeout)
        while True:
            # Without progress to report, each read waits on the server for the task's end.
            long_poll = 0.0 if on_progress is not None else state.long_poll_seconds(self._read_timeout())
            asked = time.monotonic()
            task = self.get(task_id, wait_until_end=long_poll)
            if state.changed(task) and on_progress is not None:
                on_progress(task)
            pause = state.next_pause(task, raise_on_failure)
            if pause is None:
                return task
            if long_poll and time.monotonic() - asked >= long_poll / 2:
                continue  # the server waited: ask again at once
            time.sleep(pause)

    def _read_timeout(self) -> float | None:
        read: float | None = self._client._http.timeout.read
        return read


class Agents:
    """Agents, one or more per cluster (administrators only)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(self, name: str, cluster: str) -> AgentKey:
        """Make an agent for ``cluster``; its key is in the answer, and only there."""
        return self._client.send(calls.create_agent(name, cluster))

    def list(self, cluster: str | None = None) -> builtins.list[Agent]:
        """Every agent, revoked ones included (only ``cluster``'s when given)."""
        return self._client.send(calls.list_agents(cluster))

    def revoke(self, name: str) -> Agent:
        """Revoke an agent's key: it can claim nothing more."""
        return self._client.send(calls.revoke_agent(name))


class Users:
    """Users (administrators manage them; everyone signed in may list them)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> builtins.list[User]:
        """Every user, styrmin-actions included (marked built-in)."""
        return self._client.send(calls.list_users())

    def get(self, username: str) -> User:
        """One user."""
        return self._client.send(calls.get_user(username))

    def create(self, username: str, *, role: Role | str, password: str) -> User:
        """Make a user with a role and a password."""
        return self._client.send(calls.create_user(username, role, password))

    def set_role(self, username: str, role: Role | str) -> User:
        """Change a user's role."""
        return self._client.send(calls.update_user(username, role=role))

    def deactivate(self, username: str) -> User:
        """Deactivate a user: it cannot log in and its tokens get 401 until activated again."""
        return self._client.send(calls.update_user(username, active=False))

    def activate(self, username: str) -> User:
        """Activate a deactivated user again."""
        return self._client.send(calls.update_user(username, active=True))

    def set_password(self, username: str, password: str) -> User:
        """Set a user's password (refused for built-in users)."""
        return self._client.send(calls.set_password(username, password))

    def reset_password(self, username: str) -> PasswordReset:
        """Give a user a new random password, returned once."""
        return self._client.send(calls.reset_password(username))


__all__ = ["Agents", "Client", "Deployments", "Drivers", "ProgressCallback", "Tasks", "Users"]


class Steps:
    """The steps of the running task, for actions (a ``styrmin-actions`` token of that task only).

    Styrmin's primitives use these to leave notes and a failed command's output on their hook step;
    the server redacts both and refuses steps of other tasks.
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    def add_note(self, step_id: int, note: str) -> None:
        """Add a line to the step's notes."""
        self._client.send(calls.add_step_note(step_id, note))

    def store_output(self, step_id: int, tail: str, *, truncated: bool) -> None:
        """Store the kept end of a failed command's output on the step (``truncated``: its start was cut)."""
        self._client.send(calls.store_step_output(step_id, tail, truncated))


class Backups:
    """Backups of deployments: take one, list them, read one (restore is ``deployments.restore``)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self, deployment: str | None = None, *, status: str | None = None) -> builtins.list[Backup]:
        """Every backup you may read (every role reads all), newest first; only ``deployment``'s or
        those with ``status`` when given."""
        return self._client.send(calls.list_backups(deployment, status))

    def get(self, backup_id: int) -> Backup:
        """One backup with its files."""
        return self._client.send(calls.get_backup(backup_id))

    def create(self, deployment: str, *, started_by_step: int | None = None) -> BackupChange:
        """Back up a deployment; refused (ConflictError) when its driver declares no backup action."""
        return self._client.send(calls.create_backup(deployment, started_by_step))

    def delete(self, backup_id: int) -> Change:
        """Delete a backup and its files, through a task of its deployment (Read/write)."""
        return self._client.send(calls.delete_backup(backup_id))

    def schedule(self, deployment: str) -> BackupSchedule:
        """The deployment's backup schedule; NotFoundError when it has none."""
        return self._client.send(calls.get_backup_schedule(deployment))

    def set_schedule(
        self, deployment: str, cron: str, *, keep_count: int | None = None, keep_days: int | None = None
    ) -> BackupSchedule:
        """Back up on a cron schedule (UTC), keeping ``keep_count`` scheduled backups and/or ``keep_days``."""
        return self._client.send(calls.set_backup_schedule(deployment, cron, keep_count, keep_days))

    def remove_schedule(self, deployment: str) -> None:
        """Stop taking scheduled backups of the deployment (its backups stay)."""
        self._client.send(calls.remove_backup_schedule(deployment))

    def location(self, cluster: str = "local") -> ClusterBackupLocation:
        """Where a cluster's backups are stored (never credentials), and a newer location being checked."""
        return self._client.send(calls.get_backup_location(cluster))

    def set_location(
        self,
        cluster: str = "local",
        *,
        folder: str | None = None,
        bucket: str | None = None,
        prefix: str | None = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        secret: str | None = None,
    ) -> BackupLocation:
        """Set a cluster's backup location (Admin): a ``folder``, or a ``bucket`` with ``prefix`` whose
        credentials are in Kubernetes Secret ``secret`` (NAMESPACE/NAME). Its agent checks it before
        backups use it: read ``location(cluster)`` until it is ready or failed."""
        body = {
            "kind": "s3" if bucket is not None else "folder",
            "folder": folder,
            "bucket": bucket,
            "prefix": prefix,
            "endpoint_url": endpoint_url,
            "region": region,
            "secret": secret,
        }
        return self._client.send(calls.set_backup_location(cluster, body))
