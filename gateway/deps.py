"""FastAPI dependencies: the app state, the calling team, the admin check.

    @router.get("/v1/usage")
    async def usage(gw: State, caller: TeamCaller) -> Response: ...

The edge (``gateway/edge.py``) has already checked the key of every route in
its table, before the body was read, and left its verdict in the scope: these
read it. A route the edge does not know is checked here (without the
admin-key throttle), so forgetting the table never opens a route.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.auth import Caller, admin_key_matches
from gateway.edge import ADMIN, CALLER, EdgeState
from gateway.guard import denied
from gateway.state import AppState


def get_state(request: Request) -> AppState:
    return request.app.state.gw


def get_edge(request: Request) -> EdgeState:
    return request.app.state.edge


def get_caller(request: Request) -> Caller:
    caller = request.scope.get(CALLER)
    return caller if caller is not None else get_state(request).keyring.authenticate(request.headers)


def require_admin(request: Request) -> None:
    if request.scope.get(ADMIN):
        return
    if not admin_key_matches(get_state(request).config, request.headers.get("authorization")):
        raise denied()


State = Annotated[AppState, Depends(get_state)]
Edge = Annotated[EdgeState, Depends(get_edge)]
TeamCaller = Annotated[Caller, Depends(get_caller)]
Admin = Annotated[None, Depends(require_admin)]
