"""``POST /v1/chat/completions``: the request path, in one straight line.

    auth → parse → classify → choose → reserve → call (with fallback) → settle → respond
"""

from __future__ import annotations

import logging
from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from backends.base import Completion
from gateway.dispatch import call_with_fallback
from gateway.errors import GatewayError
from gateway.exchange import Exchange, new_request_id
from gateway.features import measure
from gateway.relay import StreamRelay
from gateway.request import parse_chat_request, read_body
from gateway.responses import SettledResponse, SettledStreamingResponse
from gateway.spend import reserve_budget
from gateway.state import AppState

router = APIRouter()
logger = logging.getLogger("routegate.chat")
INTERNAL = GatewayError("The gateway hit an internal error; the request was not billed.")


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
    relay = StreamRelay(chat, features, model, result)
    return SettledStreamingResponse(relay.events(), media_type="text/event-stream",
                                    headers={**ex.response_headers(model.name),
                                             "cache-control": "no-cache"},
                                    on_sent=partial(relay.finish, ex))
