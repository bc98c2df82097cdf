"""One request, end to end, as one function that returns its ``Outcome``.

    outcome = await serve(gw, CHAT_DOOR, http, http.headers, read_body)     # a live request
    status, body, headers = await run_line(gw, caller, door, line_body)     # a batch line

    auth → parse → classify → choose → reserve → call (with fallback) → respond → settle → report

The door (``gateway/protocols/``) parses its wire request into the
pipeline's ``ModelRequest`` and renders the answer, the stream and any
error back in its own shape; nothing here asks which door it is. The caller
only does transport: ``Responder`` sends a JSON answer or a stream and
notices a client that left. Everything else happens here, and the one
``finally`` settles the budget and emits the one telemetry record, whatever
happened: success, a refusal, an upstream failure, a client gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from backends.base import ChunkStream, Completion
from backends.sse import SSEEvent
from budget.nanousd import usd
from core.config import ModelFacts
from core.errors import GatewayError, InvalidRequest
from gateway.auth import Caller
from gateway.ids import client_request_id, issued_s, new_request_id
from gateway.money.pricing import pool_rate
from gateway.money.reserve import Payer, ladder_ceilings, reserve_budget
from gateway.money.settle import Bill, Lines, bill_lines, settle_lines
from gateway.observe.otel import NO_SPAN, Span
from gateway.pipeline.answers import streamed_answer
from gateway.pipeline.attempts import AnswerCheck, Attempts
from gateway.pipeline.dispatch import call_with_fallback
from gateway.pipeline.features import RequestFeatures, measure
from gateway.pipeline.labels import learn_from
from gateway.pipeline.ladder import LOW_CONFIDENCE
from gateway.pipeline.outcome import Outcome, Share
from gateway.pipeline.pools import request_pool
from gateway.pipeline.relay import StreamRelay
from gateway.pipeline.request import ModelRequest, check_shape
from gateway.pipeline.response_cache import HIT, Plan, answer_from_cache, keep_answer, plan_for
from gateway.pipeline.warm import Warm
from gateway.protocols.base import Door

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.pipeline")
T = TypeVar("T")
INTERNAL = GatewayError("The gateway hit an internal error while serving this request.")
TOO_DEEP = InvalidRequest("The request body is nested too deeply.", code="nesting_too_deep")
PRECHECK_BYTES = 256 * 1024     # bodies above this are judged against the budget unread
PRECHECK_DIGITS = len(str(PRECHECK_BYTES))   # a content-length of fewer digits is below it


class ClientGone(Exception):
    """The client disconnected before its answer was complete."""


class Responder(Protocol):
    async def send_json(self, status: int, body: bytes, headers: dict[str, str]) -> None: ...

    async def send_stream(self, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> bool:
        """Relay ``chunks`` as SSE; False if the client left before the end."""
        ...

    async def until_gone(self, work: Awaitable[T]) -> T:
        """Await ``work``, cancelling it and raising ClientGone if the client leaves."""
        ...


async def serve(gw: AppState, door: Door, out: Responder, headers: Mapping[str, str],
                read_body: Callable[[], Awaitable[bytes]], *, caller: Caller | None = None,
                pool: str | None = None, request_id: str | None = None, run_order: int = 0,
                wait_settled: bool = False, own: bool = False) -> Outcome:
    """``request_id``: a stable id for work that may run again (a batch line after a
    crash; ``run_order``: which run, the latest's bill standing), so its settle is
    idempotent; live requests get a fresh one. ``wait_settled``: return only once the
    spend is stored (Redis or the journal), for work that records its result next (a
    batch line); a live request ends as soon as its answer is sent. ``own``: the
    gateway's own (a shadow, a judge): no labels, and the clients' rate limits skip it."""
    o = Outcome(request_id or new_request_id(), client_request_id(headers.get("x-request-id")),
                endpoint=door.name)
    started = time.perf_counter()
    attempts, bill = Attempts(), Bill(gw.tariff)
    bill.upstream = lambda: attempts.model if attempts.started else None
    span = gw.tracer.start_request(headers)     # NO_SPAN unless otel.endpoint is set
    req: ModelRequest | None = None
    plan: Plan | None = None        # the team's response cache, when it applies
    try:
        caller = caller or gw.keyring.authenticate(headers)
        o.team, o.key = caller.team_name, caller.key_id
        o.pool = pool or request_pool(caller, headers)
        req = await _read(gw, door, o, span, headers, read_body, caller, own)
        plan = (None if own or caller.response_cache is None
                else plan_for(caller, req, headers, o.pool))
        if plan is not None and await answer_from_cache(
                gw, door, out, o, caller, req, plan, run_order if request_id else None):
            return o            # a hit: the finally still reports it
        work = _serve(gw, door, out, o, caller, req, attempts, bill, span,
                      stable=request_id is not None, run_order=run_order, own=own,
                      keep=plan is not None)
        await (work if own or not caller.feedback else _tracked(gw, o, work))
    except ClientGone:
        o.status, o.error_code = 499, "client_closed_request"
    except asyncio.CancelledError:   # a shutdown past its grace, a shadow at close
        if request_id is None:       # (a batch line runs again under its id, and bills then)
            o.status, o.error_code = 499, "cancelled"
        raise
    except GatewayError as exc:
        await _fail(door, out, o, exc)
    except (RecursionError, orjson.JSONEncodeError):
        await _fail(door, out, o, TOO_DEEP)
    except Exception:
        logger.exception("request %s failed inside the gateway", o.request_id)
        await _fail(door, out, o, INTERNAL)
    finally:
        _tally(o, attempts, started)
        await _settle(gw, o, attempts, bill, span, wait_settled)
        await _after(gw, o, caller, req, attempts, bill, span, plan, own)
    return o


async def _read(gw: AppState, door: Door, o: Outcome, span: Span, headers: Mapping[str, str],
                read_body: Callable[[], Awaitable[bytes]], caller: Caller,
                own: bool) -> ModelRequest:
    """The body, judged against the budget unread when large, bounded in its JSON
    objects, then parsed by the door; the outcome notes whether it streams, its trace
    and (when prompts are logged) its messages."""
    length = headers.get("content-length")
    if length is not None and len(length) >= PRECHECK_DIGITS:   # else too small to judge
        await _admit_body(gw, caller, length, own)
    raw = await read_body()
    if not own and len(raw) > PRECHECK_BYTES and "content-length" not in headers:
        await _admit_body(gw, caller, str(len(raw)), own)      # sent chunked
    if len(raw) > 4 * gw.switches.max_body_objects:    # a smaller body holds fewer objects
        check_shape(raw, gw.switches.max_body_objects)
    req = await door.parse(raw, headers, caller)
    req.size = len(raw)
    o.stream, o.trace_id = req.stream, span.trace_id or req.trace.trace_id
    o.prompt = req.messages if gw.switches.log_prompts else None
    return req


async def _after(gw: AppState, o: Outcome, caller: Caller | None, req: ModelRequest | None,
                 attempts: Attempts, bill: Bill, span: Span, plan: Plan | None,
                 own: bool) -> None:
    """Once the request is settled: its answer kept for the response cache, its span,
    its telemetry, and what routing learns from it."""
    if plan is not None:
        await keep_answer(gw, plan, o, bill, attempts)
    span.finish(o)
    gw.telemetry.request_completed(o)
    if caller is not None and not own:
        learn_from(gw, o, req, attempts, caller, bill)


async def _admit_body(gw: AppState, caller: Caller, length: str | None, own: bool) -> None:
    """A large body is judged against the team's hard limits and rates before it is
    read and parsed (one dry-run budget call): a team past its limit costs a few
    ms, whatever it sends. A small one is cheaper to parse than to ask about."""
    if (own or not gw.config.budget.enabled or length is None or not length.isdigit()
            or int(length) <= PRECHECK_BYTES):
        return
    await gw.budget.precheck(team=caller.team.name, team_limits=caller.team.budget,
                             key_id=caller.key_id, key_limits=caller.key.budget)


async def _tracked(gw: AppState, o: Outcome, work: Coroutine[Any, Any, None]) -> None:
    """``work`` for a team with feedback on: the request is known as running while
    it runs, so one that runs long is marked for feedback (``labelling/running.py``)."""
    if gw.labels is None or o.team is None:
        return await work
    marks = gw.labels.running
    marks.opened(o.team, o.request_id, started_s=issued_s(o.request_id) or time.time())
    try:
        await work
    finally:
        marks.closed(o.request_id)


def _tally(o: Outcome, attempts: Attempts, started: float) -> None:
    o.attempts, o.escalations = attempts.count, attempts.escalations or None
    if o.model is None and attempts.model is not None:
        o.model = attempts.model.name      # a failed request is counted under its last try
    o.fallbacks = attempts.fallback_reasons or None
    o.latency_s = time.perf_counter() - started


async def _settle(gw: AppState, o: Outcome, attempts: Attempts, bill: Bill, span: Span,
                  wait: bool) -> None:
    """Bill the request (``gateway/money/settle.py``) and write it to the outcome; with
    ``wait``, return once its spend is stored."""
    stage = span.child("settle")
    # A client that left while its request still queued for a slot cost nothing.
    cancelled = o.status == 499 and attempts.started
    lines = bill_lines(bill, attempts.discarded, attempts.model, cancelled)
    if o.response_cache != HIT:          # a hit billed and reported itself
        _report(o, lines)
    settled = settle_lines(gw.budget if gw.switches.budget else None, bill, lines,
                           o.request_id)
    if settled.overdraft:
        o.overdraft_usd = usd(settled.overdraft)
    if wait and settled.futures:
        await asyncio.shield(asyncio.gather(*settled.futures))
    stage.end()


def _report(o: Outcome, billed: Lines) -> None:
    """The bill's figures in the outcome: the request log, the metrics and the labels."""
    o.usage_estimated, o.usage_anomaly = billed.estimated, billed.anomaly
    o.prompt_tokens, o.completion_tokens = billed.prompt_tokens, billed.completion_tokens
    o.cached_tokens, o.cache_write_tokens = billed.cached_tokens, billed.cache_write_tokens
    o.cost_usd = usd(billed.cost)
    if billed.cached_tokens or billed.cache_write_tokens:
        saved, premium = billed.cache_effect()
        o.cache_saved_usd, o.cache_write_premium_usd = usd(saved), usd(premium)
    if len(billed.lines) > 1 and any(x.model is not billed.lines[0].model for x in billed.lines):
        o.shares = [Share(name, part.prompt_tokens, part.completion_tokens, part.cached_tokens,
                          part.cache_write_tokens, usd(part.cost), *map(usd, part.cache_effect()))
                    for name, part in billed.by_model().items()]
    energy: float | None = None
    for x in billed.lines:       # usually one line
        per_token = x.model.energy_j_per_token
        if per_token is not None:
            energy = (energy or 0.0) + per_token * (x.usage.prompt_tokens + x.usage.completion_tokens)
    o.energy_j = energy


async def _serve(gw: AppState, door: Door, out: Responder, o: Outcome, caller: Caller,
                 req: ModelRequest, attempts: Attempts, bill: Bill, span: Span = NO_SPAN,
                 stable: bool = False, run_order: int = 0, own: bool = False,
                 keep: bool = False) -> None:
    """``keep``: keep a stream's events, to store its answer (the response cache)."""
    stage = span.child("classify")
    features = await measure(req, gw.router.encodings, gw.router.scorer(req, caller),
                             chain=gw.router.warm_matters(req))
    if features.chain:
        features.warm = gw.warm.by_model(
            caller.team_name, features.chain,
            features.head[0] if features.head is not None else None, gw.models)
    decision = gw.router.choose(req, caller, features, pool=o.pool,
                                soft_limited=gw.soft_limited(caller))
    stage.end()
    o.reason, o.predicted_quality = decision.reason, decision.predicted_quality
    o.classify_s = features.classify_s
    o.confidence, o.slo = decision.confidence, decision.slo
    bill.rate = pool_rate(gw.config, o.pool)
    bill.demand = features.demand
    bill.demand.team = caller.team_name
    bill.ceilings = ladder_ceilings(gw.tariff, gw.models, (decision.model, *decision.fallbacks),
                                    features.demand, bill.rate)
    check = AnswerCheck.for_request(gw.switches.checking, req)
    stage = span.child("reserve")
    payer = Payer(caller.team_name, caller.team_limits, caller.key_id, caller.key_limits)
    bill.reservation = await reserve_budget(
        gw.budget if gw.switches.budget else None, payer, o.request_id, decision.model,
        bill.ceilings, every_attempt_bills=check is not None, stable=stable,
        run_order=run_order, counted=not own)
    stage.end()
    if bill.reservation is not None:
        bill.reservation.progress = bill.progress      # what its lease renewals record
        if bill.reservation.soft_limited:
            o.budget = "soft-limit"
    if decision.reason == LOW_CONFIDENCE:
        attempts.escalations.append(LOW_CONFIDENCE)
    result = await out.until_gone(call_with_fallback(gw, req, decision, features, o.request_id,
                                                     attempts, check, span))
    await _answer(gw, door, out, o, caller, req, result, attempts, bill, features, keep)


async def _answer(gw: AppState, door: Door, out: Responder, o: Outcome, caller: Caller,
                  req: ModelRequest, result: Completion | ChunkStream, attempts: Attempts,
                  bill: Bill, features: RequestFeatures, keep: bool) -> None:
    """The served model's answer to the client: rendered whole, or relayed as a stream."""
    model = attempts.model
    assert model is not None
    o.model = model.name
    bill.served = True
    if features.chain:      # that model now holds this prompt in its prefix cache
        whole, head = features.kept_by(model)
        gw.warm.served(caller.team_name, features.chain, features.head if head else None,
                       Warm(model.name, attempts.replica or 0,
                            features.prompt_tokens(model.tokenizer), time.time()),
                       model.tokenizer, whole)
    headers = o.response_headers()
    if attempts.count > 1:
        headers["x-routegate-attempts"] = attempts.header()
    if isinstance(result, Completion):
        bill.reported, bill.answer = result.usage, result.data
        o.ttft_s = result.ttft_s
        billed = bill.served_answer(model)
        body = await door.render(req, result, billed.usage, billed.anomaly is not None)
        await out.send_json(200, body, headers)
        return
    kept = gw.shadows.sample_stream(req, caller, model.name)
    bill.shadowed = kept is not None
    await _relay(door, out, o, req, result, bill, features, model, headers,
                 kept if kept is not None or not keep else [])


async def _relay(door: Door, out: Responder, o: Outcome, req: ModelRequest,
                 result: ChunkStream, bill: Bill, features: RequestFeatures, model: ModelFacts,
                 headers: dict[str, str], keep: list[SSEEvent] | None = None) -> None:
    bill.relay = relay = StreamRelay(result, include_usage=req.include_usage,
                        max_events=features.demand.stream_event_cap(model),
                        ceiling=bill.ceiling(model), ours=features.demand.ours(model),
                        translator=door.translator(req, features.demand.ours(model)),
                        keep=keep)
    try:
        sent_all = await out.send_stream(relay.events(), headers)
    finally:
        # The relay closes the upstream stream as it ends; if sending failed
        # before it ever started, nobody else would (closing twice is a no-op).
        await result.aclose()
        bill.reported, bill.relayed_chunks = result.usage, relay.chunks
        bill.relayed_text, bill.usage_sent = relay.text, relay.usage_seen
        bill.prompt_seen = result.prompt_seen
        o.ttft_s, o.tpot_s = result.ttft_s or None, result.tpot_s
        if keep:
            bill.streamed = streamed_answer(keep)
    if not sent_all:
        o.status, o.error_code = 499, "client_closed_request"
    elif relay.error is not None:
        o.status, o.error_code = relay.error.status_code, relay.error.code


async def _fail(door: Door, out: Responder, o: Outcome, exc: GatewayError) -> None:
    o.status, o.error_code = exc.status_code, exc.code
    status, body = door.error(exc)
    await out.send_json(status, body, {**o.response_headers(), **exc.headers})


class CollectedAnswer:
    """A ``Responder`` that keeps the answer instead of sending it (batch lines)."""

    def __init__(self) -> None:
        self.status = 0
        self.body = b""
        self.headers: dict[str, str] = {}

    async def send_json(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        # The headers too: a batch line refused for a rate waits its retry-after.
        self.status, self.body, self.headers = status, body, headers

    async def send_stream(self, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> bool:
        raise AssertionError("batch lines are never streamed")

    async def until_gone(self, work: Awaitable[T]) -> T:
        return await work


async def run_line(gw: AppState, caller: Caller, door: Door, body: dict, *,
                   pool: str = "batch", request_id: str | None = None, run_order: int = 0,
                   own: bool = False) -> tuple[int, bytes, dict[str, str]]:
    """One non-streamed request through the same pipeline as a live one.

    Returns (HTTP status, JSON body, response headers): the door's answer, or
    its error object. Never raises for a request's own failure. A line that
    runs again with the same ``request_id`` (its first run's result was lost)
    is not billed again: of its runs, the one of the highest ``run_order`` is billed.
    """
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}

    async def read_body() -> bytes:
        return orjson.dumps(body)

    answer = CollectedAnswer()
    await serve(gw, door, answer, {}, read_body, caller=caller, pool=pool,
                request_id=request_id, run_order=run_order, wait_settled=True, own=own)
    return answer.status, answer.body, answer.headers
