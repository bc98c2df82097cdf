"""FastAPI dependencies: the app state, the calling team, the admin check.

    @router.get("/v1/usage")
    async def usage(gw: State, caller: TeamCaller) -> Response: ...
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from core.errors import AuthenticationFailed
from gateway.auth import Caller, admin_key_matches
from gateway.state import AppState


def get_state(request: Request) -> AppState:
    return request.app.state.gw


def get_caller(request: Request) -> Caller:
    return get_state(request).keyring.authenticate(request.headers.get("authorization"))


def require_admin(request: Request) -> None:
    if not admin_key_matches(get_state(request).config, request.headers.get("authorization")):
        raise AuthenticationFailed("This endpoint needs the admin key.", code="invalid_admin_key")


State = Annotated[AppState, Depends(get_state)]
TeamCaller = Annotated[Caller, Depends(get_caller)]
Admin = Annotated[None, Depends(require_admin)]
