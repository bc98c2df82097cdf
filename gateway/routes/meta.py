"""Models (the team's own: list and retrieve), liveness, readiness and metrics.

``/readyz`` answers from a probe at most two seconds old (``gateway/readiness.py``),
so a flood of it never multiplies into upstream traffic; the breakers' states
are read live.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from core.errors import ModelNotFound
from gateway.auth import Caller
from gateway.deps import Edge, TeamCaller, require_admin
from gateway.ids import response_request_id
from gateway.pipeline.routing import usable_models
from gateway.routes.json import json_response
from gateway.state import AppState

router = APIRouter()


def _json(data: object, status: int = 200, request: Request | None = None) -> Response:
    rid = response_request_id(request.headers.get("x-request-id") if request else None)
    return json_response(data, status, {"x-request-id": rid})


def _model_objects(gw: AppState, caller: Caller) -> list[dict[str, Any]]:
    """OpenAI Model objects for what the team may use: ``auto``, each model, each alias."""
    usable = usable_models(gw.config, caller)
    out: list[dict[str, Any]] = []
    if any(m.kind == "chat" for m in usable):
        out.append({"id": "auto", "object": "model", "created": 0, "owned_by": "routegate",
                    "policy": gw.config.routing.auto_policy})
    for m in usable:
        out.append({"id": m.name, "object": "model", "created": 0, "owned_by": "routegate",
                    "kind": m.kind, "context_window": m.context_window,
                    "max_output_tokens": m.max_output_tokens, "pools": m.pools,
                    "price": m.price.model_dump(), "aliases": m.aliases})
        out += [{"id": alias, "object": "model", "created": 0, "owned_by": "routegate",
                 "kind": m.kind, "alias_of": m.name} for alias in m.aliases]
    return out


@router.get("/v1/models")
async def list_models(request: Request, caller: TeamCaller) -> Response:
    gw: AppState = request.app.state.gw
    return _json({"object": "list", "data": _model_objects(gw, caller)}, request=request)


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, request: Request, caller: TeamCaller) -> Response:
    gw: AppState = request.app.state.gw
    found = next((m for m in _model_objects(gw, caller) if m["id"] == model_id), None)
    if found is None:
        raise ModelNotFound(model_id)
    return _json(found, request=request)


@router.get("/healthz")
async def healthz() -> Response:
    return _json({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request, edge: Edge) -> Response:
    gw: AppState = request.app.state.gw
    redis_ok, upstreams = await edge.readiness.get()
    status, pools = readiness(gw, redis_ok, upstreams)
    body = {"status": status, "redis": redis_ok, "pools": pools, "upstreams": upstreams,
            "breakers": {name: b.state for name, b in gw.breakers.items()},
            "classifier": None if gw.classifier is None else gw.classifier.score_path}
    return _json(body, 503 if status == "unavailable" else 200, request)


def readiness(gw: AppState, redis_ok: bool, upstreams: dict[str, bool]
              ) -> tuple[str, dict[str, bool]]:
    """("ok" | "degraded" | "unavailable", whether each pool has a model to serve it).

    A model serves when its upstream answers and its breaker lets requests
    through. Unavailable (503): Redis is down, or a pool that has chat models
    has none serving. Degraded (200): every pool is served, but some model is not."""
    serving = {name: up and gw.breakers[name].available() for name, up in upstreams.items()}
    pools: dict[str, bool] = {}
    for m in gw.config.models:
        if m.kind == "chat":
            for pool in m.pools:
                pools[pool] = pools.get(pool, False) or serving.get(m.name, False)
    if not redis_ok or not all(pools.values()):
        return "unavailable", pools
    return ("ok" if all(serving.values()) else "degraded"), pools


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    gw: AppState = request.app.state.gw
    if gw.config.metrics.require_admin_key:
        require_admin(request)
    live = await gw.telemetry.live.sample(gw)
    return Response(gw.telemetry.render(live), media_type="text/plain; version=0.0.4")
