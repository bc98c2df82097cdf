"""Calling upstream: the fallback loop, written once for streams and non-streams.

    attempts = Attempts()
    result = await call_with_fallback(gw, chat, decision, features, request_id, attempts)
    attempts.model                      # the model that answered (or was last tried)

The loop walks the decision's chain (chosen model, then its fallbacks) and
moves on only for retryable failures (``GatewayError.retryable``: network and
protocol errors, upstream 5xx and 429, timeouts before the first byte) that
happened before anything reached the client: a stream is handed back only
after its first event arrived. Anything else ends the request at once: an
upstream 400 is the client's (no other model will accept it either), an
upstream 401/403 is the operator's, and a bug is a bug.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
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


@dataclass(slots=True)
class Attempts:
    """What the loop tried: the pipeline reads it even when the loop raised."""

    model: ModelConfig | None = None     # the one called last: it answered, or failed last
    outcomes: list[str] = field(default_factory=list)   # "small:upstream_error", "medium:ok"

    @property
    def count(self) -> int:
        return len(self.outcomes)


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
    request_id: str, attempts: Attempts,
) -> Completion | ChunkStream:
    chain = (decision.model, *decision.fallbacks) if gw.config.routing.fallback else (
        decision.model,)
    for n, name in enumerate(chain, start=1):
        model = attempts.model = gw.models[name]
        call = UpstreamCall(request_id, upstream_payload(chat, model),
                            features.prompt_tokens(model.tokenizer),
                            gw.router.predicted_quality(model, features))
        backend = gw.backends[name]
        try:
            result = await (backend.stream(call) if chat.stream else backend.complete(call))
        except GatewayError as exc:
            attempts.outcomes.append(f"{name}:{exc.code}")
            if not exc.retryable or n == len(chain):
                raise
            logger.warning("request %s: %s failed (%s), attempt %d of %d", request_id, name,
                           exc.code, n, len(chain))
            continue
        attempts.outcomes.append(f"{name}:ok")
        return result
    raise AssertionError("the chain is never empty")
