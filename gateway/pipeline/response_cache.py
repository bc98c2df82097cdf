"""The response cache: a team's repeated deterministic request answered from Redis.

    plan = plan_for(caller, req, headers, pool)     # None: off, or not cacheable
    if plan and await answer_from_cache(gw, door, out, o, caller, req, plan):
        return                                      # a hit: no upstream call
    ...                                             # a miss: served, then
    await keep_answer(gw, plan, o, bill, attempts)  # stored for the next one

Opt in per team (``teams[].response_cache``, ``core/cache_config.py``). The key
is the team and the canonical request: everything sent upstream (the chat
body, and the door's own body for an upstream that gets it) but what cannot
change the answer (``UNKEYED``), with what chooses the model: the model as
named (``auto`` included), the quality target and the pool. Only a
deterministic request is cached (``temperature: 0``, or a ``seed``) unless the
team says ``any: true``. A client's ``cache-control: no-cache`` skips the
lookup, ``no-store`` the write. A hit answers in the door's own shape,
streams included (the stored answer replayed as chunks through the door's
translator), carries ``x-routegate-cache: hit`` (a cacheable miss says
``miss``), and is billed ``hit_price_fraction`` of what the original cost,
filed under the model that wrote it; an entry of a model the caller may not
use now (or no longer configured) is a miss. What is kept is only an answer
the client got whole and the gateway's checks passed: not one that escalated
or was delivered though refused, not ``content_filter``, and of a stream
only its one choice without logprobs (so a hit never differs in shape from
what was asked). Entries live in the bulk Redis within the team's
``max_team_bytes`` (``gateway/bulk.py``), never beside the budget's counters
uncounted.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from backends.base import Completion
from backends.sse import DONE, SSEEvent
from budget.nanousd import usd
from core.cache_config import ResponseCacheConfig
from core.config import ModelFacts
from core.usage import Usage
from gateway.auth import Caller
from gateway.bulk import QuotaStore
from gateway.money.reserve import Payer, settle_budget
from gateway.money.settle import Bill
from gateway.pipeline.attempts import Attempts
from gateway.pipeline.outcome import Outcome
from gateway.pipeline.relay import StreamRelay
from gateway.pipeline.request import CHAT, ModelRequest
from gateway.pipeline.routing import allowed

if TYPE_CHECKING:
    from gateway.pipeline.serve import Responder
    from gateway.protocols.base import Door
    from gateway.state import AppState

log = logging.getLogger("routegate.response_cache")
HIT, MISS = "hit", "miss"
# Sent upstream but not changing the answer, so not in the key: how it is delivered
# (stream, stream_options), who asked (user, safety_identifier: abuse monitoring), and
# the client's bookkeeping at the provider (metadata, store: stored completions;
# prompt_cache_key: a hint for the provider's prefix cache).
UNKEYED = frozenset({"stream", "stream_options", "user", "safety_identifier", "metadata",
                     "store", "prompt_cache_key"})
NATIVE_UNKEYED = frozenset({"stream", "metadata"})     # an Anthropic body's
UNKEPT_FINISH = frozenset({"content_filter"})          # a filtered answer is not reused
PIECE_CHARS = 16           # a replayed stream's text arrives in pieces of this size


@dataclass(frozen=True, slots=True)
class Plan:
    key: str
    config: ResponseCacheConfig
    pool: str
    lookup: bool           # no "cache-control: no-cache"
    store: bool            # no "cache-control: no-store"
    whole_stream: bool     # a streamed answer is kept whole: one choice, no logprobs


def plan_for(caller: Caller, req: ModelRequest, headers: Mapping[str, str],
             pool: str) -> Plan | None:
    config = caller.response_cache
    if config is None or req.operation != CHAT:
        return None
    body = req.body
    deterministic = body.get("temperature") == 0 or body.get("seed") is not None
    if not deterministic and not config.any:
        return None
    directives = cache_directives(headers.get("cache-control"))
    return Plan(request_key(caller, req, pool), config, pool,
                lookup="no-cache" not in directives, store="no-store" not in directives,
                whole_stream=req.choices == 1 and not body.get("logprobs")
                and not body.get("top_logprobs"))


def request_key(caller: Caller, req: ModelRequest, pool: str) -> str:
    """Two requests of a team get one key when the same models may answer them the
    same way: what goes upstream (``UNKEYED`` aside) and what chooses the model."""
    native = req.native
    canonical = {
        "body": {k: v for k, v in req.body.items() if k not in UNKEYED},
        "native": None if native is None else {
            "protocol": native.protocol, "headers": native.headers,
            "body": {k: v for k, v in native.body.items() if k not in NATIVE_UNKEYED}},
        "model": req.model, "pool": pool,
        "quality": req.quality if req.quality is not None else caller.quality}
    return hashlib.sha256(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).hexdigest()


def cache_directives(value: str | None) -> frozenset[str]:
    """The directive names of a ``cache-control`` value (repeated lines joined by
    ", ": ``gateway/exchange.py``), lower-cased: ``"No-Store, max-age=0"`` ->
    {"no-store", "max-age"}."""
    if not value:
        return frozenset()
    return frozenset(part.split("=", 1)[0].strip().lower() for part in value.split(","))


class ResponseCache:
    def __init__(self, store: QuotaStore) -> None:
        self.store = store

    async def find(self, team: str, plan: Plan) -> dict[str, Any] | None:
        try:
            raw = await self.store.load(team, plan.key)
        except Exception as exc:      # the cache is an optimisation: never fail on it
            log.warning("response cache: lookup failed (%r)", exc)
            return None
        entry = orjson.loads(raw) if raw else None
        return entry if isinstance(entry, dict) and isinstance(entry.get("data"), dict) else None

    async def keep(self, team: str, plan: Plan, model: str, data: dict[str, Any],
                   cost: int) -> None:
        record = orjson.dumps({"model": model, "data": data, "cost": cost})
        if len(record) > plan.config.max_entry_bytes:
            return
        try:
            await self.store.save(team, plan.key, record, ttl_s=plan.config.ttl_s,
                                  max_bytes=plan.config.max_team_bytes, max_count=1 << 30)
        except Exception as exc:
            log.warning("response cache: store failed (%r)", exc)


async def answer_from_cache(gw: AppState, door: Door, out: Responder, o: Outcome,
                            caller: Caller, req: ModelRequest, plan: Plan,
                            run_order: int | None = None) -> bool:
    """Answer ``req`` from the cache if it holds it (then True): no upstream call,
    billed ``hit_price_fraction`` of the original. ``run_order``: a batch line's run
    (its id is stable): the hit is billed as that run's answer."""
    entry = await gw.response_cache.find(caller.team.name, plan) if plan.lookup else None
    model = None if entry is None else usable_model(gw, caller, req, plan.pool,
                                                    str(entry.get("model")))
    if entry is None or model is None:
        o.response_cache = MISS
        return False
    original = int(entry.get("cost") or 0)
    cost = round(original * plan.config.hit_price_fraction)
    payer = Payer(caller.team_name, caller.team_limits, caller.key_id, caller.key_limits)
    held = await _reserve(gw, payer, o, cost, run_order)   # rpm counts a hit; the limit judges it
    o.model, o.reason, o.response_cache = model.name, "response-cache", HIT
    o.cost_usd, o.cache_saved_usd = usd(cost), usd(original - cost)
    data = entry["data"]
    usage = Usage.from_wire(data.get("usage")) or Usage()
    headers = {**o.response_headers(), "x-routegate-cache": HIT}
    try:
        if not req.stream:
            body = await door.render(req, Completion(orjson.dumps(data), data, usage, 0.0, 0.0),
                                     usage, False)
            await out.send_json(200, body, headers)
        else:
            relay = StreamRelay(Replay(data), include_usage=req.include_usage, max_events=1 << 20,
                                translator=door.translator(req, usage.prompt_tokens))
            if not await out.send_stream(relay.events(), headers):
                o.status, o.error_code = 499, "client_closed_request"
    finally:
        if held is not None:
            settled = settle_budget(gw.budget, held, model, Usage(), cost)
            if run_order is not None:       # a batch line: it records its answer next
                await asyncio.shield(settled)
    return True


def usable_model(gw: AppState, caller: Caller, req: ModelRequest, pool: str,
                 name: str) -> ModelFacts | None:
    """The model that wrote an entry, if the caller may have its answer now: it is
    configured and allowed to the team in the pool, and so is the model the request
    named (an entry written by its fallback). As routing would judge it."""
    model = gw.models.get(name)
    if model is None or not allowed(model, caller, pool):
        return None
    if req.routed or req.model == name:
        return model
    named = next((m for m in gw.models.values()
                  if req.model == m.name or req.model in m.config.aliases), None)
    return model if named is not None and allowed(named, caller, pool) else None


async def _reserve(gw: AppState, payer: Payer, o: Outcome, cost: int,
                   run_order: int | None) -> Any:
    if not gw.config.budget.enabled:
        return None
    return await gw.budget.reserve(
        request_id=o.request_id, team=payer.team, team_limits=payer.team_limits,
        key_id=payer.key_id, key_limits=payer.key_limits, model="cache",
        max_cost_nanousd=cost, max_tokens=0, stable=run_order is not None,
        run_order=run_order or 0)


async def keep_answer(gw: AppState, plan: Plan, o: Outcome, bill: Bill,
                      attempts: Attempts) -> None:
    """After a served miss: the answer the client got, and what it cost, for the next.
    Only one the gateway's checks passed at once (``attempts``: it did not escalate,
    nor was it delivered refused for want of another model), not filtered, and of a
    stream only what ``streamed_answer`` keeps whole (``Plan.whole_stream``)."""
    if not plan.store or o.status != 200 or o.model is None or o.response_cache != MISS:
        return
    if attempts.escalations or not attempts.tried or attempts.tried[-1].outcome != "ok":
        return
    if isinstance(bill.answer, dict):
        data = bill.answer
    elif plan.whole_stream and isinstance(bill.streamed, dict):
        data = bill.streamed
    else:
        return
    choices = data.get("choices")
    if not isinstance(choices, list) or any(
            not isinstance(c, dict) or c.get("finish_reason") in UNKEPT_FINISH for c in choices):
        return
    data = {**data, "usage": {"prompt_tokens": o.prompt_tokens,
                              "completion_tokens": o.completion_tokens,
                              "total_tokens": o.prompt_tokens + o.completion_tokens}}
    await gw.response_cache.keep(o.team or "", plan, o.model, data,
                                 round(o.cost_usd * 1e9))


class Replay:
    """A stored answer as an upstream's stream of chat chunks (a ``ChunkStream``)."""

    buffered = True
    ttft_s = 0.0
    tpot_s = None
    prompt_seen = None

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self.usage = Usage.from_wire(data.get("usage"))

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        for chunk in replay_chunks(self._data):
            yield SSEEvent.from_data(chunk)
        yield SSEEvent(DONE, None, done=True)

    async def aclose(self) -> None:
        return None


def replay_chunks(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``chat.completion.chunk`` events that add up to the stored completion."""
    base = {"id": data.get("id") or "chatcmpl-cached", "object": "chat.completion.chunk",
            "created": data.get("created") or 0, "model": data.get("model") or ""}
    if data.get("system_fingerprint") is not None:
        base["system_fingerprint"] = data["system_fingerprint"]
    chunks = []
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            chunks += [{**base, "choices": [c]} for c in _choice_deltas(choice)]
    chunks.append({**base, "choices": [], "usage": data.get("usage")})
    return chunks


def _choice_deltas(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """One stored choice as a stream's choices, in order: role, text, tool calls, finish."""
    index, message = choice.get("index", 0), choice.get("message") or {}
    text, logprobs = message.get("content"), choice.get("logprobs")
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if isinstance(text, str) and logprobs:
        # The text in one piece beside all its logprobs: a client adds both up across
        # chunks, and a piece of text cut anywhere has no logprobs of its own.
        deltas.append({"content": text})
    elif isinstance(text, str):
        deltas += [{"content": text[i:i + PIECE_CHARS]} for i in range(0, len(text), PIECE_CHARS)]
    for i, call in enumerate(message.get("tool_calls") or ()):
        deltas.append({"tool_calls": [{**call, "index": i}]})
    out = [{"index": index, "delta": d, "finish_reason": None} for d in deltas]
    if logprobs:
        out[1 if len(out) > 1 else 0]["logprobs"] = logprobs
    out.append({"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")})
    return out
