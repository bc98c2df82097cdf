"""``/ui``: the operator page, and the one JSON document it reads.

    GET  /ui                  the page (static HTML + script; no data in it)
    POST /ui/login            form field ``key``: the admin key; sets the session cookie
    POST /ui/logout           clears it
    GET  /admin/overview      JSON (gateway/observe/overview.py): the admin key as a bearer
                              token, or the page's session cookie

The key travels only in a POST body, never in a URL, and the server logs no
request bodies. The cookie holds not the key itself but an HMAC of it
(``session_token``): HttpOnly (no script reads it), SameSite=Strict (no other
site's page sends it), Secure over HTTPS. It opens only this page's JSON; the
admin API still wants the key itself. Changing the admin key ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from importlib import resources

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from core.errors import AuthenticationFailed
from gateway.auth import admin_key_matches
from gateway.deps import State
from gateway.observe.overview import build_overview
from gateway.state import AppState

router = APIRouter()
COOKIE = "routegate_ui"
SESSION_S = 12 * 3600


def session_token(admin_key: str) -> str:
    return hmac.new(admin_key.encode(), b"routegate-ui-session", hashlib.sha256).hexdigest()


def _static(name: str) -> bytes:
    return resources.files("gateway").joinpath("static", name).read_bytes()


def _has_session(gw: AppState, request: Request) -> bool:
    expected = os.environ.get(gw.config.admin_key_env)
    cookie = request.cookies.get(COOKIE)
    return bool(expected and cookie and hmac.compare_digest(cookie, session_token(expected)))


@router.get("/ui")
async def ui_page() -> Response:
    return Response(_static("ui.html"), media_type="text/html; charset=utf-8",
                    headers={"cache-control": "no-store", "x-frame-options": "DENY",
                             "content-security-policy": "default-src 'self'; "
                             "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"})


@router.get("/ui/ui.js")
async def ui_script() -> Response:
    return Response(_static("ui.js"), media_type="text/javascript; charset=utf-8",
                    headers={"cache-control": "no-store"})


def _back_to_page(error: bool = False) -> Response:
    return Response(status_code=303, headers={"location": "/ui#denied" if error else "/ui",
                                              "cache-control": "no-store"})


@router.post("/ui/login")
async def ui_login(request: Request, gw: State) -> Response:
    form = await request.form()
    key = form.get("key")
    expected = os.environ.get(gw.config.admin_key_env)
    if not isinstance(key, str) or not expected or not admin_key_matches(
            gw.config, f"Bearer {key}"):
        return _back_to_page(error=True)
    response = _back_to_page()
    response.set_cookie(COOKIE, session_token(expected), max_age=SESSION_S, path="/",
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/ui/logout")
async def ui_logout() -> Response:
    response = _back_to_page()
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/admin/overview")
async def admin_overview(request: Request, gw: State) -> Response:
    if not (_has_session(gw, request)
            or admin_key_matches(gw.config, request.headers.get("authorization"))):
        raise AuthenticationFailed("This endpoint needs the admin key.", code="invalid_admin_key")
    live = await gw.telemetry.live.sample(gw)
    body = build_overview(gw.telemetry.families(), live)
    return Response(orjson.dumps(body), media_type="application/json",
                    headers={"cache-control": "no-store"})
