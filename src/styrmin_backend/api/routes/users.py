"""Users: administrators manage them; everyone signed in can list them."""

from __future__ import annotations

from fastapi import Request, Response

from styrmin_backend.api.deps import Admin, Db, Reader, api_router
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.schemas import (
    PasswordRequest,
    PasswordResetOut,
    UserCreateRequest,
    UserOut,
    UserUpdateRequest,
)
from styrmin_backend.services import users

router = api_router(tags=["users"])


@router.get("/users", response_model=list[UserOut])
def list_users(
    db: Db, _: Reader, request: Request, response: Response, limit: Limit = 500, cursor: Cursor = None
) -> list[UserOut]:
    """Every user by name, styrmin-actions included (marked built-in)."""
    found = [UserOut.model_validate(row) for row in users.list_users(db)]
    return page_of(
        found, lambda u: u.username, limit=limit, cursor=cursor, request=request, response=response
    )


@router.get("/users/{username}", response_model=UserOut)
def get_user(username: str, db: Db, _: Reader) -> UserOut:
    """One user."""
    return UserOut.model_validate(users.get_user(db, username))


@router.post("/users", response_model=UserOut, status_code=201)
def create_user(body: UserCreateRequest, db: Db, _: Admin) -> UserOut:
    """Make a user with a role and a password."""
    return UserOut.model_validate(users.create_user(db, body.username, body.role, body.password))


@router.patch("/users/{username}", response_model=UserOut)
def update_user(username: str, body: UserUpdateRequest, db: Db, principal: Admin) -> UserOut:
    """Change a user's role, or deactivate or activate it (its tokens are refused while deactivated)."""
    return UserOut.model_validate(
        users.update_user(db, username, by=principal, role=body.role, is_active=body.active)
    )


@router.put("/users/{username}/password", response_model=UserOut)
def set_password(username: str, body: PasswordRequest, db: Db, _: Admin) -> UserOut:
    """Set a user's password (refused for built-in users)."""
    return UserOut.model_validate(users.set_password(db, username, body.password))


@router.post("/users/{username}/password/reset", response_model=PasswordResetOut)
def reset_password(username: str, db: Db, _: Admin) -> PasswordResetOut:
    """Give a user a new random password, shown once (refused for built-in users)."""
    return PasswordResetOut(username=username, password=users.reset_password(db, username))
