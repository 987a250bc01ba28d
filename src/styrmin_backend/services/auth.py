"""Logins, tokens and sessions: minting, checking and revoking."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from styrmin_backend.clock import as_utc, utcnow
from styrmin_backend.domain.actions_scope import ActionsScope
from styrmin_backend.domain.errors import InvalidInput, NotAuthenticated, NotFound, Refused, TooManyAttempts
from styrmin_backend.domain.login_throttle import (
    FailureCount,
    address_key,
    after_failure,
    retry_after,
    user_key,
)
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.users import ACTIONS_USERNAME, check_login_allowed
from styrmin_backend.services.principal import ACTIONS_TOKEN_KIND, Principal
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.services.secrets import hash_token, new_token, verify_password
from styrmin_backend.services.users import User
from styrmin_backend.store.db import read_for_update
from styrmin_backend.store.models import DeploymentRow, LoginFailureRow, TaskRow, TokenRow, UserRow


class TokenKind(StrEnum):
    """What a token was made for."""

    SESSION = "session"
    API = "api"
    ACTIONS = ACTIONS_TOKEN_KIND


@dataclass(frozen=True)
class IssuedToken:
    """A token just made: the only moment its plain value exists."""

    id: int
    token: str
    expires_at: datetime


def login(session: Session, username: str, password: str, address: str = "unknown") -> UserRow:
    """The user that ``username`` and ``password`` identify; raises NotAuthenticated otherwise.

    ``address`` is the client's address: repeated failures of a user name from it, or from it at
    all, are refused for a while (TooManyAttempts), as ``domain.login_throttle`` says.
    """
    check_login_allowed(username)
    now = utcnow()
    keys = (user_key(username, address), address_key(address))
    _refuse_while_blocked(session, username, keys, now)
    user = session.scalars(select(UserRow).where(UserRow.username == username)).one_or_none()
    if not verify_password(user.password_hash if user else None, password) or user is None:
        _count_failure(session, keys, now)
        raise NotAuthenticated("The user name or password is wrong.", field="password")
    session.execute(delete(LoginFailureRow).where(LoginFailureRow.key == keys[0]))
    if not user.is_active:
        raise NotAuthenticated(
            f'The user "{username}" is deactivated; ask an administrator to activate it.', field="username"
        )
    return user


def _count(row: LoginFailureRow | None) -> FailureCount | None:
    return None if row is None else FailureCount(row.failures, as_utc(row.last_failed_at), row.blocked_until)


def _refuse_while_blocked(session: Session, username: str, keys: tuple[str, str], now: datetime) -> None:
    rows = session.scalars(select(LoginFailureRow).where(LoginFailureRow.key.in_(keys))).all()
    waits = {row.key: retry_after(_count(row), now) for row in rows}
    if waits.get(keys[0]):
        seconds = waits[keys[0]] or 0
        raise TooManyAttempts(
            f'Too many failed logins as "{username}" from your address; try again in {seconds} s.',
            retry_after=seconds,
        )
    if waits.get(keys[1]):
        seconds = waits[keys[1]] or 0
        raise TooManyAttempts(
            f"Too many failed logins from your address; try again in {seconds} s.", retry_after=seconds
        )


def _count_failure(session: Session, keys: tuple[str, str], now: datetime) -> None:
    """Count a failed login under ``keys``, in a transaction of its own: the login's own is rolled back."""
    with Session(bind=session.get_bind()) as counting:
        try:
            with counting.begin():
                for key in keys:
                    row = read_for_update(counting, LoginFailureRow, key)
                    count = after_failure(_count(row), key, now)
                    if row is None:
                        counting.add(LoginFailureRow(key=key, failures=count.failures, last_failed_at=now))
                        row = counting.get(LoginFailureRow, key)
                    assert row is not None
                    row.failures, row.last_failed_at = count.failures, count.last_failed_at
                    row.blocked_until = count.blocked_until
        except IntegrityError:  # another server counted the first failure of this key at the same moment
            pass


def issue_token(
    session: Session,
    user: UserRow | User,
    kind: TokenKind,
    lifetime: timedelta,
    name: str = "",
    task_id: int | None = None,
) -> IssuedToken:
    """Make a token of ``kind`` for ``user``, valid for ``lifetime``; only its hash is stored."""
    return _issue(session, user.id, kind, lifetime, name, task_id)


def _issue(
    session: Session, user_id: int, kind: TokenKind, lifetime: timedelta, name: str, task_id: int | None
) -> IssuedToken:
    if lifetime <= timedelta(0):
        raise InvalidInput("A token's lifetime must be positive.", field="expires_in")
    token = new_token()
    now = utcnow()
    row = TokenRow(
        user_id=user_id,
        kind=kind.value,
        name=name,
        token_hash=hash_token(token),
        created_at=now,
        expires_at=now + lifetime,
        task_id=task_id,
    )
    session.add(row)
    session.flush()
    return IssuedToken(id=row.id, token=token, expires_at=row.expires_at)


# Built once, with the token's hash bound at each call: every request with a token sends it.
_TOKEN_AND_USER = (
    select(
        TokenRow.id,
        TokenRow.kind,
        TokenRow.revoked_at,
        TokenRow.expires_at,
        TokenRow.task_id,
        UserRow.id.label("user_id"),
        UserRow.username,
        UserRow.role,
        UserRow.is_active,
        UserRow.is_builtin,
    )
    .join(UserRow, UserRow.id == TokenRow.user_id)
    .where(TokenRow.token_hash == bindparam("token_hash"))
)
_ACTIONS_SCOPE = (
    select(TaskRow.deployment_name, DeploymentRow.driver_name)
    .outerjoin(DeploymentRow, DeploymentRow.id == TaskRow.deployment_id)
    .where(TaskRow.id == bindparam("task"))
)


def authenticate(session: Session, token: str) -> Principal:
    """The principal of ``token``; raises NotAuthenticated saying why it is not accepted."""
    found = session.execute(_TOKEN_AND_USER, {"token_hash": hash_token(token)}).one_or_none()
    if found is None:
        raise NotAuthenticated("The token is not valid; log in again to get a new one.")
    if found.revoked_at is not None:
        raise NotAuthenticated("The token was revoked; log in again to get a new one.")
    if as_utc(found.expires_at) <= utcnow():
        raise NotAuthenticated("The token has expired; log in again to get a new one.")
    if not found.is_active:
        raise NotAuthenticated(
            f'The user "{found.username}" is deactivated, so its tokens are refused; '
            "an administrator can activate it again."
        )
    return Principal(
        user_id=found.user_id,
        username=found.username,
        role=Role(found.role),
        is_builtin=found.is_builtin,
        token_id=found.id,
        token_kind=found.kind,
        actions_task_id=found.task_id,
        actions_scope=_actions_scope(session, found.task_id) if found.kind == TokenKind.ACTIONS else None,
    )


def _actions_scope(session: Session, task_id: int | None) -> ActionsScope | None:
    """The deployment and task of an actions token minted for task ``task_id``; None without one."""
    if task_id is None:
        return None
    found = session.execute(_ACTIONS_SCOPE, {"task": task_id}).one_or_none()
    if found is None:
        return None
    deployment, driver = found
    return ActionsScope(deployment=deployment, task_id=task_id, driver=driver or "")


def authenticate_session(session: Session, token: str) -> Principal:
    """The principal of a session cookie's ``token``; only a web session's token is accepted there."""
    principal = authenticate(session, token)
    if principal.token_kind != TokenKind.SESSION:
        raise NotAuthenticated("The session cookie holds no web session; log in again.")
    return principal


def revoke_token(session: Session, token_id: int, *, by: Principal) -> None:
    """Revoke token ``token_id``: its owner or an admin may; an actions token only by Styrmin itself."""
    row = session.get(TokenRow, token_id)
    if row is None or (row.user_id != by.user_id and by.role is not Role.ADMIN):
        raise NotFound(f"There is no token {token_id} of yours.", field="token_id")
    if row.kind == TokenKind.ACTIONS and by.token_id != token_id:
        raise Refused(
            f"Token {token_id} belongs to a reconciliation of {ACTIONS_USERNAME}; Styrmin revokes it when "
            "the reconciliation ends. To stop actions from calling the API, deactivate the user.",
            field="token_id",
        )
    if row.revoked_at is None:
        row.revoked_at = utcnow()


def list_tokens(session: Session, user_id: int) -> list[TokenRow]:
    """The tokens of ``user_id`` that are neither revoked nor expired, newest first."""
    rows = session.scalars(
        select(TokenRow)
        .where(TokenRow.user_id == user_id, TokenRow.revoked_at.is_(None))
        .order_by(TokenRow.id.desc())
    ).all()
    now = utcnow()
    return [row for row in rows if as_utc(row.expires_at) > now]


_ACTIONS_USER = select(UserRow.id).where(UserRow.username == ACTIONS_USERNAME)


def mint_actions_token(session: Session, lifetime: timedelta, task_id: int | None = None) -> IssuedToken:
    """A short-lived token of styrmin-actions for the reconciliation of ``task_id``.

    Internal: no endpoint makes one for a user; the agent gets it when it claims the task.
    """
    user_id = session.execute(_ACTIONS_USER).scalar_one()
    name = f"reconciliation of task {task_id}" if task_id else "reconciliation"
    return _issue(session, user_id, TokenKind.ACTIONS, lifetime, name=name, task_id=task_id)


_REVOKE_ACTIONS_TOKEN = (
    update(TokenRow)
    .where(
        TokenRow.id == bindparam("token"),
        TokenRow.kind == TokenKind.ACTIONS.value,
        TokenRow.revoked_at.is_(None),
    )
    .values(revoked_at=bindparam("now"))
    # Built once (each task's end sends it), and with no loaded token to bring up to date: a task's
    # end authenticates the agent, not the token.
    .execution_options(synchronize_session=False)
)


def revoke_actions_token(session: Session, token_id: int) -> None:
    """Revoke a reconciliation's styrmin-actions token when the reconciliation ends, however it ends."""
    session.execute(_REVOKE_ACTIONS_TOKEN, {"token": token_id, "now": utcnow()})


class Token(ReadModel):
    """A token as its owner sees it in a list: its name, kind and lifetime; never the token or its hash."""

    id: int
    name: str
    kind: str
    created_at: datetime
    expires_at: datetime


def live_tokens(session: Session, user_id: int) -> list[Token]:
    """The tokens of ``user_id`` that are neither revoked nor expired, newest first, as read models."""
    return [Token.model_validate(row) for row in list_tokens(session, user_id)]
