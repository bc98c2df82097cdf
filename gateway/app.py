"""The ASGI application.

    app = create_app(load_config("config/routegate.yaml"))
    uvicorn.run(app, port=8080)

``POST`` to each protocol's endpoint (``/v1/chat/completions`` and the
other doors, ``gateway/routes/doors.py``) is served in plain ASGI
(``gateway.asgi``); every other route is FastAPI behind the edge
(``gateway.edge``: the key and the body's cap checked before FastAPI reads
the body). State is created in the lifespan (``AppState.start``,
``EdgeState.start``) and lives on ``app.state.gw`` and ``app.state.edge``;
nothing happens at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from batch.blobs import BlobMissing
from core.config import GatewayConfig, load_config
from core.errors import (
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    ServiceUnavailable,
)
from gateway.asgi import RouteGate
from gateway.edge import EdgeState
from gateway.ids import response_request_id
from gateway.observe.startup import log_startup
from gateway.reload import reload_logged, watch_config
from gateway.routes import admin, anthropic, batches, doors, feedback, files, meta, responses, ui, usage
from gateway.server import raise_open_file_limit
from gateway.state import AppState, Classifiers

log = logging.getLogger("routegate.app")

CONFIG_ENV = "ROUTEGATE_CONFIG"
DEFAULT_CONFIG = "config/routegate.yaml"


def _error(exc: GatewayError, request: Request) -> Response:
    headers = {"x-request-id": response_request_id(request.headers.get("x-request-id")), **exc.headers}
    return Response(exc.to_json(), status_code=exc.status_code, media_type="application/json",
                    headers=headers)


def _from_http_exception(request: Request, exc: StarletteHTTPException) -> GatewayError:
    """Starlette's own refusals (unknown path, wrong method, ...) in our error tree."""
    path = request.url.path
    if exc.status_code == 404:
        return NotFound(f"Unknown path {path}")
    if exc.status_code == 405:
        return MethodNotAllowed(f"{path} does not accept {request.method}.",
                                headers=dict(exc.headers or {}))
    error = (InvalidRequest if exc.status_code < 500 else GatewayError)(
        str(exc.detail), code=None, headers=dict(exc.headers or {}))
    error.status_code = exc.status_code
    return error


def create_app(config: GatewayConfig, config_path: str | None = None,
               checked: Classifiers | None = None) -> RouteGate:
    """``checked``: classifiers already loaded for this config (``AppState.start``)."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal checked
        gw = app.state.gw = await AppState.start(config, config_path, checked)
        checked = None    # a reload may replace them: this must not keep the old ones
        app.state.edge = EdgeState.start(gw)
        log_startup(gw)     # where it listens, what it runs on, a warning per unsafe setting
        if config_path is not None:
            gw.spawn(watch_config(gw))
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(
                    signal.SIGHUP, lambda: gw.spawn(reload_logged(gw)))
        try:
            yield
        finally:
            await gw.aclose()

    app = FastAPI(title="routegate", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> Response:
        return _error(exc, request)

    app.add_exception_handler(BlobMissing, _blob_missing)  # type: ignore[arg-type]
    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return _error(InvalidRequest(str(first.get("msg", "invalid request")), param=param), request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(_from_http_exception(request, exc), request)

    # Starlette runs an Exception handler in its outermost ServerErrorMiddleware:
    # the handler's response is sent, then the exception is re-raised so that
    # the server (uvicorn) logs its traceback.
    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return _error(GatewayError("The server had an error while processing your request."),
                      request)

    for module in (meta, usage, admin, files, batches, responses, feedback, ui):
        app.include_router(module.router)
    return RouteGate(app, {**doors.ROUTES, **anthropic.ROUTES})


async def _blob_missing(request: Request, exc: BlobMissing) -> Response:
    """The file's record is there but its bytes are not in this replica's store:
    a store the replicas do not share, or lost data. A 503, not a 500."""
    log.error("%s %s: %s", request.method, request.url.path, exc)
    return _error(ServiceUnavailable(f"{exc} Its record is kept; try again, or ask the "
                                     "operator to check the blob store.",
                                     code="file_bytes_unavailable"), request)


def create_app_from_env() -> RouteGate:
    """Factory for ``uvicorn --factory`` and multi-worker serving."""
    path = os.environ.get(CONFIG_ENV, DEFAULT_CONFIG)
    return serving_app(load_config(path), path)


def serving_app(config: GatewayConfig, config_path: str,
                checked: Classifiers | None = None) -> RouteGate:
    """The app ``routegate serve`` runs, with the process set up for serving."""
    logging.basicConfig(level=os.environ.get("ROUTEGATE_LOG_LEVEL", "info").upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    raise_open_file_limit()   # every connection holds a descriptor; 1,024 is not many
    return create_app(config, config_path=config_path, checked=checked)
