"""Calling upstream: one attempt loop for fallbacks and escalations alike.

    attempts = Attempts()
    result = await call_with_fallback(gw, req, decision, features, request_id, attempts, check)
    attempts.model          # the model whose answer this is (or that failed last)

The loop walks the decision's ladder (``gateway/pipeline/ladder.py``: the chosen
model, then the rungs above it) and moves on for two reasons:

- the upstream failed before anything reached the client, retryably
  (``GatewayError.retryable``: network and protocol errors, upstream 5xx and
  429, a stream's first-byte timeout); an upstream 429 (or Anthropic's 529
  overloaded) also rests that model until its ``Retry-After``. Anything else
  ends the request at once: an upstream 400 is the client's (no other model
  will take it either), a 401/403 is the operator's, and a bug is a bug.
- the answer failed its checks (``AnswerCheck``: invalid JSON, schema or tool
  arguments, truncated structured output, low logprob). Its output is billed
  and the next rung is tried; the last rung's answer is delivered as it is.

Each model's circuit breaker sees every attempt, and an open one is skipped; a
half-open breaker's probe is resolved however its attempt ends
(``scheduling/breaker.py``, ``Breaker.attempt``).
A deadline (``escalation.deadline_s``) covers all attempts together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from backends.base import ChunkStream, Completion, UpstreamCall
from core.config import ModelFacts
from core.errors import (
    GatewayError,
    ServiceUnavailable,
    UpstreamOverloaded,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from gateway.observe.otel import NO_SPAN, Span
from gateway.pipeline.answers import HeldStream
from gateway.pipeline.attempts import AnswerCheck, Attempt, Attempts
from gateway.pipeline.features import RequestFeatures
from gateway.pipeline.request import ModelRequest
from policies import Decision

if TYPE_CHECKING:
    from gateway.state import AppState
    from scheduling.breaker import Trial
    from scheduling.scheduler import PoolScheduler, Ticket

logger = logging.getLogger("routegate.dispatch")


def upstream_payload(req: ModelRequest, model: ModelFacts, check: AnswerCheck | None
                     ) -> dict[str, Any]:
    """The client's body, untouched but for the model id, (on streams) usage,
    and logprobs when the answer's confidence is checked."""
    payload = dict(req.body)
    payload["model"] = model.wire_model
    param = model.output_cap_param
    if param is not None or "max_completion_tokens" in payload:
        _one_output_cap(payload, param)
    if req.stream:
        # Always ask for usage, so every stream is billed exactly; the relay
        # drops the usage chunk again when the client did not ask for it.
        payload["stream_options"] = {**(req.body.get("stream_options") or {}),
                                     "include_usage": True}
    if check is not None and check.added_logprobs:
        payload["logprobs"] = True
    return payload


def _one_output_cap(payload: dict[str, Any], param: str | None) -> None:
    """One output cap goes upstream, under the name it reads (OpenAI refuses both at
    once; vLLM, SGLang and llama.cpp read max_completion_tokens first): its value is
    max_completion_tokens' when the client sent it, as those servers would read it."""
    completion = payload.pop("max_completion_tokens", None)
    plain = payload.pop("max_tokens", None)
    value = completion if completion is not None else plain
    if value is not None:
        payload[param or ("max_completion_tokens" if completion is not None else "max_tokens")] = value


async def call_with_fallback(
    gw: AppState, req: ModelRequest, decision: Decision, features: RequestFeatures,
    request_id: str, attempts: Attempts, check: AnswerCheck | None = None, span: Span = NO_SPAN,
) -> Completion | ChunkStream:
    chain = (decision.model, *decision.fallbacks)
    deadline = time.monotonic() + gw.switches.deadline_s
    failed: GatewayError | None = None
    refused: tuple[int, Completion | ChunkStream] | None = None   # the latest refused answer
    for n, name in enumerate(chain, start=1):
        with gw.breakers[name].attempt() as trial:     # leaving it resolves a probe, always
            if not trial.allowed:
                logger.info("request %s: skipping %s (breaker open or resting)", request_id, name)
                continue
            model = attempts.model = gw.models[name]
            attempt_span = span.child("upstream.attempt", name)
            call = _upstream_call(gw, req, model, features, request_id, check, attempt_span)
            try:
                result = await _attempt(gw, req, model, call, check, deadline, attempts, decision.pool)
                attempts.replica = call.replica
            except GatewayError as exc:
                _note_failure(trial, exc)
                attempt_span.end(exc.code or "error", failed=True)
                attempts.tried.append(Attempt(model, exc.code or "error"))
                if not exc.retryable or not gw.switches.fallback:
                    raise
                logger.warning("request %s: %s failed (%s), attempt %d of %d", request_id, name,
                               exc.code, n, len(chain))
                failed = exc
                continue
            trial.ok()
        verdict = _judge(result, check)
        attempt_span.end(verdict or "ok")
        if verdict is None or n == len(chain):
            attempts.tried.append(Attempt(model, verdict or "ok"))
            return _strip_logprobs(result, check)
        attempts.tried.append(_discarded(model, verdict, result))
        attempts.escalations.append(verdict)
        refused = (len(attempts.tried) - 1, result)
        logger.info("request %s: %s answered %s; escalating", request_id, name, verdict)
    if refused is not None:
        # The rungs above failed: the refused answer is still the best there is.
        index, result = refused
        attempts.model = attempts.tried[index].model
        attempts.tried[index] = Attempt(attempts.model, attempts.tried[index].outcome)
        return _strip_logprobs(result, check)
    raise failed or ServiceUnavailable(
        "Every model that could serve this request is failing; try again shortly.",
        code="models_unavailable", headers={"retry-after": "5"})


def _upstream_call(gw: AppState, req: ModelRequest, model: ModelFacts,
                   features: RequestFeatures, request_id: str, check: AnswerCheck | None,
                   span: Span) -> UpstreamCall:
    """What goes to ``model`` for this attempt: its body, its route, its stream's cap."""
    warm = features.warm.get(model.name) if features.warm else None
    return UpstreamCall(request_id, upstream_payload(req, model, check),
                        features.prompt_tokens(model.tokenizer),
                        gw.router.predicted_quality(model, features),
                        span.upstream_headers(req.trace, request_id),
                        max_events=features.demand.stream_event_cap(model) if req.stream else 0,
                        route=req.operation, native=req.native,
                        replica=warm.replica if warm is not None else None,
                        prefill_tokens=features.prefill_tokens(model) if warm else None)


async def _attempt(gw: AppState, req: ModelRequest, model: ModelFacts, call: UpstreamCall,
                   check: AnswerCheck | None, deadline: float, attempts: Attempts,
                   pool: str = "interactive") -> Completion | ChunkStream:
    # A slot on the model (scheduling/scheduler.py), held until the answer is read
    # or, for a stream, until it is closed; every other way out frees it here.
    scheduler = gw.schedulers[model.name]
    attempts.started = False
    # What it must prefill: a warm prefix needs none (the scheduler's TTFT and backlog).
    prefill = call.prompt_tokens if call.prefill_tokens is None else call.prefill_tokens
    ticket = await scheduler.acquire(pool, prefill, deadline - time.monotonic())
    attempts.started = True     # from here a client that leaves has had its prompt read
    try:
        # A non-streamed call's own timer (total_s) also keeps the request's
        # deadline (UpstreamCall.bound_s). A stream's deadline binds only when it
        # is nearer than first_byte_s, or a held stream is read to its end: only
        # then is a second timer set (one per request costs throughput).
        call.deadline = deadline
        left = deadline - time.monotonic()
        if check is None and (not req.stream or left >= model.first_byte_s):
            return await _call(gw, req, model, call, check, scheduler, ticket)
        async with asyncio.timeout(max(0.0, left)):
            return await _call(gw, req, model, call, check, scheduler, ticket)
    except BaseException as exc:
        scheduler.release(ticket, failed=exc)
        if isinstance(exc, TimeoutError):
            raise UpstreamTimeout("The request's deadline (escalation.deadline_s) passed "
                                  f"before model {model.name} answered.", generating=True) from None
        raise


async def _call(gw: AppState, req: ModelRequest, model: ModelFacts, call: UpstreamCall,
                check: AnswerCheck | None, scheduler: PoolScheduler, ticket: Ticket
                ) -> Completion | ChunkStream:
    backend = gw.backends[model.name]
    if not req.stream:
        return scheduler.finished(ticket, await backend.complete(call))
    stream = scheduler.holding(ticket, await backend.stream(call))
    if check is None or not check.hold_streams:
        return stream
    return await HeldStream.hold(stream, call.max_events)


def _note_failure(trial: Trial, exc: GatewayError) -> None:
    # Anything else (an upstream 400 or 401, a queue refusal, a total_s timeout)
    # says nothing about the model's health: no verdict, a probe is released.
    if isinstance(exc, UpstreamRateLimited | UpstreamOverloaded):
        trial.rest(exc.retry_after_s or 1.0)    # capped at breaker.max_rest_s
    elif exc.retryable:
        trial.failed()


def _judge(result: Completion | ChunkStream, check: AnswerCheck | None) -> str | None:
    if check is None or not isinstance(result, Completion | HeldStream):
        return None
    return check.judge(result)


def _discarded(model: ModelFacts, verdict: str, result: Completion | ChunkStream) -> Attempt:
    """A refused answer, kept only for what it costs."""
    if isinstance(result, Completion):
        return Attempt(model, verdict, result.usage, result.data)
    held = result if isinstance(result, HeldStream) else None
    return Attempt(model, verdict, result.usage, None, held.chunks if held else 0)


def _strip_logprobs(result: Completion | ChunkStream, check: AnswerCheck | None
                    ) -> Completion | ChunkStream:
    """Logprobs the gateway asked for on its own behalf are not the client's."""
    if check is None or not check.added_logprobs:
        return result
    if isinstance(result, Completion):
        for choice in result.data.get("choices") or ():
            if isinstance(choice, dict):
                choice["logprobs"] = None
        result.body = orjson.dumps(result.data)
    elif isinstance(result, HeldStream):
        result.strip_logprobs()
    return result
