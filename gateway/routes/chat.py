"""``POST /v1/chat/completions``: the request path, in one straight line.

    auth → parse → classify → choose → reserve → call (with fallback) → respond → settle

Served in plain ASGI (``gateway.asgi``): this route is nearly all the traffic.
Settling runs after the last byte went out, so the client never waits for it.
"""

from __future__ import annotations

import logging

from backends.base import Completion
from core.errors import GatewayError
from gateway.asgi import ClientGone, HTTPExchange
from gateway.dispatch import call_with_fallback
from gateway.exchange import Exchange, new_request_id
from gateway.features import measure
from gateway.relay import StreamRelay
from gateway.request import parse_chat_request
from gateway.spend import reserve_budget
from gateway.state import AppState

logger = logging.getLogger("routegate.chat")
INTERNAL = GatewayError("The gateway hit an internal error; the request was not billed.")
PATH = "/v1/chat/completions"


async def chat_completions(http: HTTPExchange) -> None:
    gw: AppState = http.app.state.gw
    ex = Exchange(gw, new_request_id(http.headers.get("x-request-id")))
    try:
        ex.identify(gw.keyring.authenticate(http.headers.get("authorization")))
        chat = parse_chat_request(await http.read_body(gw.config.max_body_bytes), http.headers)
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
    except ClientGone:
        ex.record.status, ex.record.error_code = 499, "client_closed_request"
        await ex.finish(None, None)
        return
    except GatewayError as exc:
        await ex.finish(None, None, error=exc)
        await http.respond(exc.status_code, exc.to_json(), {**ex.response_headers(), **exc.headers})
        return
    except Exception:
        logger.exception("request %s failed inside the gateway", ex.request_id)
        await ex.finish(None, None, error=INTERNAL)
        await http.respond(INTERNAL.status_code, INTERNAL.to_json(), ex.response_headers())
        return
    if isinstance(result, Completion):
        try:
            await http.respond(200, result.body, ex.response_headers(model.name))
        finally:
            await ex.finish(model, result.usage, ttft_s=result.ttft_s)
        return
    relay = StreamRelay(chat, features, model, result)
    try:
        await http.stream(relay.events(), ex.response_headers(model.name))
    finally:
        await relay.finish(ex)
