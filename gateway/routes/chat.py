"""``POST /v1/chat/completions``: the request path, in one straight line.

    auth → parse → classify → choose → reserve → call (with fallback) → settle → respond
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from backends.base import ChunkStream, Completion, Usage
from gateway.config import ModelConfig
from gateway.dispatch import call_with_fallback
from gateway.errors import GatewayError
from gateway.exchange import Exchange, new_request_id
from gateway.features import RequestFeatures, measure
from gateway.request import ChatRequest, parse_chat_request, read_body
from gateway.spend import reserve_budget
from gateway.state import AppState

router = APIRouter()
logger = logging.getLogger("routegate.chat")
INTERNAL = GatewayError("The gateway hit an internal error; the request was not billed.")


class SettledResponse(Response):
    """Sends the body first, then settles: the client does not wait for the
    Redis round trip, and a client that vanished mid-send is billed all the same."""

    def __init__(self, *args: Any, on_sent: Callable[[], Awaitable[None]], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.on_sent = on_sent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.on_sent()


def error_response(exc: GatewayError, headers: dict[str, str]) -> Response:
    return Response(exc.to_json(), status_code=exc.status_code, media_type="application/json",
                    headers={**headers, **exc.headers})


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    gw: AppState = request.app.state.gw
    ex = Exchange(gw, new_request_id(request.headers.get("x-request-id")))
    try:
        ex.identify(gw.keyring.authenticate(request.headers.get("authorization")))
        chat = parse_chat_request(await read_body(request, gw.config.max_body_bytes),
                                  request.headers)
        ex.record.stream = chat.stream
        features = await measure(chat, gw.router.encodings,
                                 gw.classifier if gw.router.needs_score(chat) else None)
        assert ex.caller is not None
        decision = gw.router.choose(chat, ex.caller, features,
                                    soft_limited=gw.soft_limited(ex.caller))
        ex.record.reason = decision.reason
        ex.record.predicted_quality = decision.predicted_quality
        ex.record.confidence = decision.confidence
        await reserve_budget(gw, ex, chat, decision, features)
        model, result, attempts = await call_with_fallback(gw, chat, decision, features,
                                                           ex.request_id)
        ex.record.attempts = attempts
    except GatewayError as exc:
        await ex.finish(None, None, error=exc)
        return error_response(exc, ex.response_headers())
    except Exception:
        logger.exception("request %s failed inside the gateway", ex.request_id)
        await ex.finish(None, None, error=INTERNAL)
        return error_response(INTERNAL, ex.response_headers())
    if isinstance(result, Completion):
        return SettledResponse(result.body, media_type="application/json",
                               headers=ex.response_headers(model.name),
                               on_sent=partial(ex.finish, model, result.usage,
                                               ttft_s=result.ttft_s))
    return StreamingResponse(relay(ex, chat, features, model, result),
                             media_type="text/event-stream",
                             headers={**ex.response_headers(model.name),
                                      "cache-control": "no-cache"})


def estimated_usage(features: RequestFeatures, model: ModelConfig, chunks: int) -> Usage:
    """When a stream ends without the upstream's usage (client left, upstream
    broke), bill what was generated: one token per relayed chunk."""
    return Usage(features.prompt_tokens(model.tokenizer), chunks, estimated=True)


async def relay(ex: Exchange, chat: ChatRequest, features: RequestFeatures, model: ModelConfig,
                stream: ChunkStream) -> AsyncIterator[bytes]:
    chunks = 0
    error: GatewayError | None = None
    try:
        async for event in stream:
            if event.is_usage_only and not chat.include_usage:
                continue
            if event.has_tokens:
                chunks += 1
            yield event.raw
    except GatewayError as exc:
        # Headers are gone already: OpenAI's SDK raises on an in-stream error event.
        error = exc
        yield b"data: " + exc.to_json() + b"\n\n"
    finally:
        # A client that disconnects cancels this generator; shield the cleanup
        # so the upstream is closed and the budget settled all the same.
        with anyio.CancelScope(shield=True):
            await stream.aclose()
            usage = stream.usage or estimated_usage(features, model, chunks)
            await ex.finish(model, usage, ttft_s=stream.ttft_s or None, tpot_s=stream.tpot_s,
                            error=error)
