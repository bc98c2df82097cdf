"""``/ui``: the operator page, and the one JSON document it reads.

    GET  /ui                  the page (static HTML + script; no data in it)
    POST /ui/login            form field ``key``: the admin key; opens a session, sets its cookie
    POST /ui/logout           ends the session (server-side) and clears the cookie
    GET  /admin/overview      JSON (gateway/observe/overview.py): the admin key as a bearer
                              token, or the page's session cookie (checked at the edge)
    GET  /admin/history       the last ``minutes`` (default and most: metrics.history_minutes)
                              per minute, from Redis (gateway/observe/history_view.py); same access

The key travels only in a POST body (at most 4 KiB, within 5 s: the edge and
the protocol see to it), never in a URL, and the server logs no request
bodies. The cookie holds a random session id (``gateway/sessions.py``), not
the key or anything derived from it: HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), Secure over HTTPS. It opens
only this page's JSON; the admin API still wants the key itself. A session
ends after 12 hours, at sign-out, or when the admin key changes.

Wrong keys count against the client's address (``gateway/guard.py``): past
ten a minute the form comes back with ``#throttled`` (a script that does not
ask for HTML gets 429 ``rate_limit_exceeded``), ``retry-after`` either way.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from core.errors import (
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServiceUnavailable,
)
from gateway.deps import Admin, Edge, State
from gateway.edge import SESSION_COOKIE, client_address
from gateway.observe.history_view import read_history
from gateway.observe.overview import build_overview
from gateway.routes.json import json_response
from gateway.sessions import SESSION_S

router = APIRouter()
COOKIE = SESSION_COOKIE


def _static(name: str) -> bytes:
    return resources.files("gateway").joinpath("static", name).read_bytes()


@router.get("/ui")
async def ui_page() -> Response:
    return Response(_static("ui.html"), media_type="text/html; charset=utf-8",
                    headers={"cache-control": "no-store", "x-frame-options": "DENY",
                             "content-security-policy": "default-src 'self'; "
                             "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"})


SCRIPTS = frozenset({"ui.js", "charts.js", "history.js"})


@router.get("/ui/{name}")
async def ui_script(name: str) -> Response:
    if name not in SCRIPTS:
        raise NotFound(f"No such file: /ui/{name}.")
    return Response(_static(name), media_type="text/javascript; charset=utf-8",
                    headers={"cache-control": "no-store"})


def _back_to_page(note: str = "", headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=303, headers={"location": "/ui" + (f"#{note}" if note else ""),
                                              "cache-control": "no-store", **(headers or {})})


@router.post("/ui/login")
async def ui_login(request: Request, edge: Edge) -> Response:
    form = await request.form()       # at most 4 KiB: the edge's cap for this route
    key = form.get("key")
    try:
        await edge.guard.check(client_address(request.scope), key if isinstance(key, str) else None)
    except RateLimited as exc:
        if "text/html" not in request.headers.get("accept", ""):
            raise
        return _back_to_page("throttled", {"retry-after": exc.headers["retry-after"]})
    except AuthenticationFailed:
        return _back_to_page("denied")
    assert isinstance(key, str)
    response = _back_to_page()
    response.set_cookie(COOKIE, await edge.sessions.create(key), max_age=SESSION_S, path="/",
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/ui/logout")
async def ui_logout(request: Request, edge: Edge) -> Response:
    await edge.sessions.end(request.cookies.get(COOKIE))
    response = _back_to_page()
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/admin/overview")
async def admin_overview(gw: State, _: Admin) -> Response:
    live = await gw.telemetry.live.sample(gw)
    body = build_overview(gw.telemetry.families(), live)
    return json_response(body, headers={"cache-control": "no-store"})


@router.get("/admin/history")
async def admin_history(gw: State, _: Admin, minutes: int | None = None) -> Response:
    keep = gw.config.metrics.history_minutes
    if gw.history is None or gw.redis is None:
        raise NotFound("No history is kept: metrics.history_minutes is 0 or metrics are off.")
    if minutes is not None and minutes < 1:
        raise InvalidRequest("minutes must be at least 1.", param="minutes")
    pools = gw.config.pools.interactive
    try:       # more than is kept: what is kept
        body = await read_history(gw.redis.client, gw.config.budget.key_prefix,
                                  min(minutes or keep, keep),
                                  pools.ttft_ms / 1000, pools.tpot_ms / 1000)
    except RedisError as exc:
        raise ServiceUnavailable("The history store (Redis) is unreachable.") from exc
    return json_response(body, headers={"cache-control": "no-store"})
