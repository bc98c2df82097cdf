"""The ASGI application.

    app = create_app(load_config("config/routegate.yaml"))
    uvicorn.run(app, port=8080)

State is created in the lifespan (``AppState.start``) and lives on
``app.state.gw``; nothing happens at import time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from gateway.config import GatewayConfig, load_config
from gateway.errors import GatewayError, InvalidRequest, NotFound
from gateway.exchange import new_request_id
from gateway.routes import chat, meta
from gateway.state import AppState

CONFIG_ENV = "ROUTEGATE_CONFIG"
DEFAULT_CONFIG = "config/routegate.yaml"


def _error(exc: GatewayError, request: Request) -> Response:
    headers = {"x-request-id": new_request_id(request.headers.get("x-request-id")), **exc.headers}
    return Response(exc.to_json(), status_code=exc.status_code, media_type="application/json",
                    headers=headers)


def create_app(config: GatewayConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.gw = await AppState.start(config)
        try:
            yield
        finally:
            await app.state.gw.aclose()

    app = FastAPI(title="routegate", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> Response:
        return _error(exc, request)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return _error(InvalidRequest(str(first.get("msg", "invalid request")), param=param), request)

    @app.exception_handler(404)
    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(NotFound(f"Unknown path {request.url.path}"), request)

    app.include_router(chat.router)
    app.include_router(meta.router)
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` and multi-worker serving."""
    logging.basicConfig(level=os.environ.get("ROUTEGATE_LOG_LEVEL", "info").upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return create_app(load_config(os.environ.get(CONFIG_ENV, DEFAULT_CONFIG)))
