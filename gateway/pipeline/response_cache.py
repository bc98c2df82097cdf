"""The response cache: a team's repeated deterministic request answered from Redis.

    plan = plan_for(gw, caller, req, headers)       # None: off, or not cacheable
    if plan and await answer_from_cache(gw, door, out, o, caller, req, plan):
        return                                      # a hit: no upstream call
    ...                                             # a miss: served, then
    await keep_answer(gw, plan, o, bill)            # stored for the next one

Opt in per team (``teams[].response_cache``, ``core/cache_config.py``). The key
is the team and the canonical request: its model as named (``auto``
included), messages, tools, tool choice, response format and sampling
parameters, whatever the door (a chat body underneath). Only a
deterministic request is cached (``temperature: 0``, or a ``seed``) unless the
team says ``any: true``. A client's ``cache-control: no-cache`` skips the
lookup, ``no-store`` the write. A hit answers in the door's own shape,
streams included (the stored answer replayed as chunks through the door's
translator), carries ``x-routegate-cache: hit`` (a cacheable miss says
``miss``), and is billed ``hit_price_fraction`` of what the original cost,
filed under the model that wrote it. Entries live in the bulk Redis within
the team's ``max_team_bytes`` (``gateway/bulk.py``), never beside the
budget's counters uncounted.
"""

from __future__ import annotations

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
from core.types import Usage
from gateway.auth import Caller
from gateway.bulk import QuotaStore
from gateway.money.reserve import Payer, settle_budget
from gateway.money.settle import Bill
from gateway.pipeline.outcome import Outcome
from gateway.pipeline.relay import StreamRelay
from gateway.pipeline.request import CHAT, ModelRequest

if TYPE_CHECKING:
    from gateway.pipeline.serve import Responder
    from gateway.protocols.base import Door
    from gateway.state import AppState

log = logging.getLogger("routegate.response_cache")
HIT, MISS = "hit", "miss"
# What makes two requests the same question; anything else (stream, user, metadata)
# does not change the answer.
KEYED = ("model", "messages", "tools", "tool_choice", "response_format", "temperature",
         "top_p", "seed", "max_tokens", "max_completion_tokens", "n", "stop", "logprobs",
         "top_logprobs", "presence_penalty", "frequency_penalty", "logit_bias",
         "parallel_tool_calls")
PIECE_CHARS = 16           # a replayed stream's text arrives in pieces of this size


@dataclass(frozen=True, slots=True)
class Plan:
    key: str
    config: ResponseCacheConfig
    lookup: bool           # no "cache-control: no-cache"
    store: bool            # no "cache-control: no-store"


def plan_for(caller: Caller, req: ModelRequest, headers: Mapping[str, str]) -> Plan | None:
    config = caller.response_cache
    if config is None or req.operation != CHAT:
        return None
    body = req.body
    deterministic = body.get("temperature") == 0 or body.get("seed") is not None
    if not deterministic and not config.any:
        return None
    canonical = orjson.dumps({k: body[k] for k in KEYED if k in body} | {"model": req.model},
                             option=orjson.OPT_SORT_KEYS)
    directive = (headers.get("cache-control") or "").lower()
    return Plan(hashlib.sha256(canonical).hexdigest(), config,
                lookup="no-cache" not in directive, store="no-store" not in directive)


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
                            caller: Caller, req: ModelRequest, plan: Plan) -> bool:
    """Answer ``req`` from the cache if it holds it (then True): no upstream call,
    billed ``hit_price_fraction`` of the original."""
    entry = await gw.response_cache.find(caller.team.name, plan) if plan.lookup else None
    if entry is None:
        o.response_cache = MISS
        return False
    model = gw.models.get(str(entry.get("model")))
    original = int(entry.get("cost") or 0)
    cost = round(original * plan.config.hit_price_fraction)
    payer = Payer(caller.team_name, caller.team_limits, caller.key_id, caller.key_limits)
    held = await _reserve(gw, payer, o, cost)    # rpm counts a hit; the hard limit judges it
    o.model, o.reason, o.response_cache = (model.name if model else None), "response-cache", HIT
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
            settle_budget(gw.budget, held, model, Usage(), cost)
    return True


async def _reserve(gw: AppState, payer: Payer, o: Outcome, cost: int) -> Any:
    if not gw.config.budget.enabled:
        return None
    return await gw.budget.reserve(
        request_id=o.request_id, team=payer.team, team_limits=payer.team_limits,
        key_id=payer.key_id, key_limits=payer.key_limits, model="cache",
        max_cost_nanousd=cost, max_tokens=0)


async def keep_answer(gw: AppState, plan: Plan, o: Outcome, bill: Bill) -> None:
    """After a served miss: the answer the client got, and what it cost, for the next."""
    if not plan.store or o.status != 200 or o.model is None or o.response_cache != MISS:
        return
    data = bill.answer if isinstance(bill.answer, dict) else bill.streamed
    if not isinstance(data, dict):
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
    chunks = []
    for choice in data.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        index, message = choice.get("index", 0), choice.get("message") or {}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        text = message.get("content")
        if isinstance(text, str):
            deltas += [{"content": text[i:i + PIECE_CHARS]}
                       for i in range(0, len(text), PIECE_CHARS)]
        for i, call in enumerate(message.get("tool_calls") or ()):
            deltas.append({"tool_calls": [{**call, "index": i}]})
        chunks += [{**base, "choices": [{"index": index, "delta": d, "finish_reason": None}]}
                   for d in deltas]
        chunks.append({**base, "choices": [{"index": index, "delta": {},
                                            "finish_reason": choice.get("finish_reason")}]})
    chunks.append({**base, "choices": [], "usage": data.get("usage")})
    return chunks
