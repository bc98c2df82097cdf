"""Calling upstream: the fallback loop, written once for streams and non-streams.

    model, result, attempts = await call_with_fallback(gw, chat, decision, features, rid)

The loop walks the decision's chain (chosen model, then its fallbacks) and
moves on only for retryable failures (5xx, timeouts, unreachable) that
happened before anything reached the client: a stream is handed back only
after its first event arrived.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from backends.base import ChunkStream, Completion, UpstreamCall
from core.config import ModelConfig
from core.errors import GatewayError
from gateway.features import RequestFeatures
from gateway.request import ChatRequest
from policies import Decision

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.dispatch")


def upstream_payload(chat: ChatRequest, model: ModelConfig) -> dict[str, Any]:
    """The client's body, untouched but for the model id and (on streams) usage."""
    payload = dict(chat.body)
    payload["model"] = model.wire_model
    if chat.stream:
        # Always ask for usage, so every stream is billed exactly; the relay
        # drops the usage chunk again when the client did not ask for it.
        payload["stream_options"] = {**(chat.body.get("stream_options") or {}),
                                     "include_usage": True}
    return payload


async def call_with_fallback(
    gw: AppState, chat: ChatRequest, decision: Decision, features: RequestFeatures,
    request_id: str,
) -> tuple[ModelConfig, Completion | ChunkStream, int]:
    chain = (decision.model, *decision.fallbacks) if gw.config.routing.fallback else (
        decision.model,)
    last: GatewayError | None = None
    for attempt, name in enumerate(chain, start=1):
        model = gw.models[name]
        backend = gw.backends[name]
        call = UpstreamCall(request_id, upstream_payload(chat, model),
                            features.prompt_tokens(model.tokenizer),
                            gw.router.predicted_quality(model, features))
        try:
            if chat.stream:
                return model, await backend.stream(call), attempt
            return model, await backend.complete(call), attempt
        except GatewayError as exc:
            if not exc.retryable:
                raise
            logger.warning("request %s: %s failed (%s), attempt %d of %d", request_id, name,
                           exc.code, attempt, len(chain))
            last = exc
    assert last is not None
    raise last
