"""Models list, liveness, readiness and metrics.

``/readyz`` answers from a probe at most two seconds old (``gateway/readiness.py``),
so a flood of it never multiplies into upstream traffic; the breakers' states
are read live.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.deps import Edge, TeamCaller, require_admin
from gateway.ids import response_request_id
from gateway.state import AppState

router = APIRouter()


def _json(data: object, status: int = 200, request: Request | None = None) -> Response:
    rid = response_request_id(request.headers.get("x-request-id") if request else None)
    return Response(orjson.dumps(data), status_code=status, media_type="application/json",
                    headers={"x-request-id": rid})


@router.get("/v1/models")
async def list_models(request: Request, _: TeamCaller) -> Response:
    gw: AppState = request.app.state.gw
    aliases = [{"id": "auto", "object": "model", "created": 0, "owned_by": "routegate",
                "policy": gw.config.routing.auto_policy}]
    models = [{"id": m.name, "object": "model", "created": 0, "owned_by": "routegate",
               "context_window": m.context_window, "max_output_tokens": m.max_output_tokens,
               "pools": m.pools, "price": m.price.model_dump()} for m in gw.config.models]
    return _json({"object": "list", "data": aliases + models}, request=request)


@router.get("/healthz")
async def healthz() -> Response:
    return _json({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request, edge: Edge) -> Response:
    gw: AppState = request.app.state.gw
    redis_ok, upstreams = await edge.readiness.get()
    ok = redis_ok and any(upstreams.values())
    body = {"status": "ok" if ok else "unavailable", "redis": redis_ok, "upstreams": upstreams,
            "breakers": {name: b.state for name, b in gw.breakers.items()}}
    return _json(body, 200 if ok else 503, request)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    gw: AppState = request.app.state.gw
    if gw.config.metrics.require_admin_key:
        require_admin(request)
    live = await gw.telemetry.live.sample(gw)
    return Response(gw.telemetry.render(live), media_type="text/plain; version=0.0.4")
