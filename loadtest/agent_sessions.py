"""``agent_sessions``: tool-using agent sessions on the simulated fleet, cache-aware or not.

    routegate loadtest experiment --scenarios agent_sessions --quick --out /tmp/lt

Each session is an agent loop: a system prompt of 1-6k tokens and 4-20
tool definitions, a user task, then turns of (the model's tool call, the
tool's result of 100-3k tokens) until its 6-30 turns are done, then its
answer; each turn's output (tool call or answer) is 30-400 tokens, asked of
the simulator with vLLM's ``min_tokens`` under a ``max_tokens`` of twice the
plan's longest, so every output ends as a model's does (a tool call, or a
stop), never cut off at its limit (which the gateway rightly escalates). The
prompt grows every turn and is sent whole, as agents do.
Sessions start at the Azure chat trace's arrival times; each turn waits for
the one before (a closed loop per session), and streams.

The demo fleet runs with its prefix caches (``sim/prefix_cache.py``) in a
KV cache sized for a full batch at the full context (``kv_cache_tokens``:
``max_batch`` x ``context_window``; the simulator's chat-sized default of
4,096 tokens a slot holds less than one long session on ``large``),
cached input priced at 10% of input, and an interactive TTFT SLO of 3 s (an
agent's turn reads thousands of tokens), none refused for a predicted late
start (``scheduler.refuse_late: false``) nor after 5 s in the queue (it waits
up to ``AGENT_WAIT_S``, as an agent waits for its answer). A turn refused
with a 429 or 5xx is retried twice, after its retry-after or 0.5 s then 1 s,
as the openai SDK does (so is one whose connection failed); a session ends at
a turn that still fails, or once the plan's ``deadline_s`` has passed. Policies
compared:

- ``cache_aware``: ``routing.cache_aware: true`` (the default): the model that
  holds a session's prefix reads it at the cached price, with no prefill;
- ``cache_blind``: ``routing.cache_aware: false``: today's routing, blind to it;
- ``large``: every turn to ``large``, which always meets the quality target.

The three run side by side, each its own gateway and simulated fleet, on the
same sessions at the same arrival times (a full run takes as long as one policy).

Per policy: cost per completed session (the team's ledger over the sessions
that finished), the prefix-cache hit rate (cached ÷ prompt tokens, from the
answers' usage), model switches per session, the share of turns routed with
their quality target met (the routing reason), and interactive TTFT. And a
pair of bounds on the same turns on the same models (``bound_costs``): with a
cache that never evicts (what caching alone can save for those choices), and
with every switch of model free (each turn reads the turn before's prompt
cached). Over ``cache_blind``'s own cost they say how much of the 0.7x target
is in reach: by better caching, and by fewer switches at no price.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from core.config import Price
from loadtest.fleet import fleet_config, gateway_process
from loadtest.prompts import PromptBuilder
from loadtest.stats import quantiles_ms
from loadtest.traces import azure_trace

POLICIES = ("cache_aware", "cache_blind", "large")
CACHED_SHARE = 0.10              # cached input at 10% of the input price
AGENT_TTFT_MS = 3000             # the interactive TTFT SLO of an agent's turn
AGENT_WAIT_S = 90                # the longest a turn queues in the gateway (the chat's: 5 s)
RETRIES = 2                      # as the openai SDK: a 429 or 5xx is tried twice more
QUALITY_MET = ("quality-met", "quality-met-slo-missed", "requested")


@dataclass(frozen=True)
class SessionPlan:
    sessions: int
    turns: tuple[int, int]           # per session, inclusive
    system: tuple[int, int]          # system prompt tokens
    tools: tuple[int, int]           # tool definitions
    result: tuple[int, int]          # tokens of each tool result
    answer: tuple[int, int]          # output tokens of each turn (its min_tokens)
    rps: float = 1.0                 # session starts per second (the trace's arrivals)
    quality: float = 0.7
    deadline_s: float = 600.0        # no turn starts after this (from the first start)

    @property
    def max_tokens(self) -> int:
        """What every turn asks at most: room above its output, as agents leave."""
        return 2 * self.answer[1]


QUICK = SessionPlan(sessions=8, turns=(6, 10), system=(1000, 3000), tools=(4, 12),
                    result=(100, 1200), answer=(30, 200), rps=1.0, deadline_s=180)
FULL = SessionPlan(sessions=24, turns=(6, 30), system=(1000, 6000), tools=(4, 20),
                   result=(100, 3000), answer=(30, 400), rps=0.5, deadline_s=1200)
DEADLINE = "deadline"            # a session cut off by its plan's deadline_s


def policy_config(policy: str, tmp: Path) -> dict[str, Any]:
    # An agent's turn reads a prompt of thousands of tokens: its TTFT SLO is seconds, not
    # the chat's 450 ms, which a cold prefill of a 3k-token prompt misses on every model.
    config = fleet_config("slo_aware", tmp,
                          extra={"pools": {"interactive": {"ttft_ms": AGENT_TTFT_MS}}})
    for model in config["models"]:
        # An agent waits for its turn: none is refused for a predicted late start (a cold
        # prefill of 30k tokens on large takes 12 s whatever the queue), so every policy
        # completes its sessions and is compared on the same work.
        # Nor given up on after the chat's 5 s in the queue: a turn waits its turn for up to
        # AGENT_WAIT_S, as an agent's client waits for its answer.
        model.setdefault("scheduler", {}).update(refuse_late=False,
                                                 interactive_wait_s=AGENT_WAIT_S)
    for model in config["models"]:
        # A KV cache that holds a full batch at the full context, as a server meant for
        # agents is sized: the simulator's default (4,096 tokens a slot, sized for chat)
        # holds less than one long session on `large`, and evicts every prefix.
        sim = model.setdefault("simulate", {})
        sim.setdefault("kv_cache_tokens", sim.get("max_batch", 8) * model["context_window"])
        # Each turn's output is its planned length (min_tokens), not max_tokens.
        sim["output_tokens_mean"] = 1
        price = model["price"]
        price["cached_input_per_mtok"] = round(price["input_per_mtok"] * CACHED_SHARE, 6)
    routing = config.setdefault("routing", {})
    routing["cache_aware"] = policy != "cache_blind"
    if policy == "large":
        routing.update(auto_policy="fixed", fixed_model="large")
    return config


def _tool(rng: random.Random, i: int, builder: PromptBuilder) -> dict[str, Any]:
    fields = {f"arg_{j}": {"type": "string", "description": builder.body(rng.randint(8, 30))}
              for j in range(rng.randint(2, 6))}
    return {"type": "function", "function": {
        "name": f"tool_{i}", "description": builder.body(rng.randint(20, 60)),
        "parameters": {"type": "object", "properties": fields, "required": ["arg_0"]}}}


@dataclass
class Session:
    system: str
    task: str
    tools: list[dict[str, Any]]
    results: list[int]               # tool result tokens, one per turn after the first
    answers: list[int]               # output tokens per turn (min_tokens)
    start: float


def sessions(plan: SessionPlan, builder: PromptBuilder, seed: int = 7) -> list[Session]:
    rng = random.Random(seed)
    arrivals = [r.t for r in azure_trace("conv", plan.rps, plan.sessions / plan.rps + 5)]
    out = []
    for n in range(plan.sessions):
        turns = rng.randint(*plan.turns)
        tools = [_tool(rng, i, builder) for i in range(rng.randint(*plan.tools))]
        out.append(Session(
            system=f"Session {n}: you are an agent.\n" + builder.body(rng.randint(*plan.system)),
            task=f"Task {n}: " + builder.body(rng.randint(40, 200)), tools=tools,
            results=[rng.randint(*plan.result) for _ in range(turns - 1)],
            answers=[rng.randint(*plan.answer) for _ in range(turns)],
            start=arrivals[n % len(arrivals)] if arrivals else n / plan.rps))
    return out


@dataclass
class Turn:
    model: str
    reason: str
    ttft_s: float | None
    prompt: int
    cached: int
    ok: bool
    completion: int = 0


async def _turn(client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]
                ) -> tuple[Turn, dict[str, Any]]:
    """One turn, retried as the openai SDK retries a 429 or 5xx."""
    for attempt in range(RETRIES + 1):
        turn, message, wait = await _try_turn(client, url, key, body)
        if turn.ok or wait is None or attempt == RETRIES:
            return turn, message
        await asyncio.sleep(wait if wait > 0 else 0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


async def _try_turn(client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]
                    ) -> tuple[Turn, dict[str, Any], float | None]:
    """One streamed turn: what it was routed to, its TTFT and usage, and its answer."""
    try:
        return await _streamed_turn(client, url, key, body)
    except httpx.TransportError as exc:     # as the SDK: a connection error is retried
        return Turn("-", f"transport {type(exc).__name__}", None, 0, 0, False), {}, 0.0


async def _streamed_turn(client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any]
                         ) -> tuple[Turn, dict[str, Any], float | None]:
    started = time.perf_counter()
    ttft: float | None = None
    usage: dict[str, Any] = {}
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async with client.stream("POST", url + "/v1/chat/completions", json=body,
                             headers={"authorization": f"Bearer {key}"}) as r:
        model, reason = r.headers.get("x-routegate-model", "-"), r.headers.get(
            "x-routegate-reason", "-")
        if r.status_code != 200:
            try:
                error = orjson.loads(await r.aread()).get("error") or {}
            except (orjson.JSONDecodeError, AttributeError):
                error = {}
            retry = r.status_code == 429 or r.status_code >= 500
            wait = float(r.headers.get("retry-after") or 0) if retry else None
            failure = f"{r.status_code} {error.get('code') or error.get('type') or ''}".strip()
            return Turn(model, failure, None, 0, 0, False), {}, wait
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = orjson.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if (delta.get("content") or delta.get("tool_calls")) and ttft is None:
                    ttft = time.perf_counter() - started
                text.append(delta.get("content") or "")
                for call in delta.get("tool_calls") or ():
                    slot = calls.setdefault(call.get("index", 0), {"id": call.get("id"), "type": "function",
                                            "function": {"name": "", "arguments": ""}})
                    fn = call.get("function") or {}
                    slot["function"]["name"] += fn.get("name") or ""
                    slot["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Turn(model, reason, ttft, int(usage.get("prompt_tokens") or 0), int(cached), True,
                int(usage.get("completion_tokens") or 0)), message, None


async def run_session(client: httpx.AsyncClient, url: str, key: str, s: Session,
                      builder: PromptBuilder, plan: SessionPlan, t0: float) -> list[Turn]:
    await asyncio.sleep(max(0.0, t0 + s.start - time.monotonic()))
    messages: list[dict[str, Any]] = [{"role": "system", "content": s.system},
                                      {"role": "user", "content": s.task}]
    turns = []
    for i, output in enumerate(s.answers):
        if time.monotonic() > t0 + plan.deadline_s:
            turns.append(Turn("-", DEADLINE, None, 0, 0, False))
            break
        last = i == len(s.answers) - 1
        body = {"model": f"auto:{plan.quality}", "messages": messages, "tools": s.tools,
                "tool_choice": "auto" if last else "required", "min_tokens": output,
                "max_tokens": plan.max_tokens,
                "stream": True, "stream_options": {"include_usage": True}}
        turn, message = await _turn(client, url, key, body)
        turns.append(turn)
        if not turn.ok:
            break
        messages = [*messages, message]
        if not last:
            call_id = (message.get("tool_calls") or [{}])[0].get("id") or f"call_{i}"
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": builder.body(s.results[i])})
    return turns


def run_spend(usage: dict[str, Any]) -> float:
    """What a fresh team spent, from its ``/v1/usage?days=2``: the ledger of today and
    yesterday, so a run that crosses the team's midnight is counted whole (its
    ``spent_today_usd`` starts again from zero there)."""
    return sum(int(row["cost_nanousd"]) for row in usage["ledger"]) / 1e9


async def _spent(url: str, key: str) -> float:
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.get(url + "/v1/usage", params={"days": 2},
                             headers={"authorization": f"Bearer {key}"})
        r.raise_for_status()
        return run_spend(r.json())


Prices = dict[str, tuple[float, float, float]]     # model -> (input, cached, output) per token


def prices_of(config: dict[str, Any]) -> Prices:
    out = {}
    for m in config["models"]:
        p = Price(**m["price"])          # the product's reading: no cached price, the input's
        out[m["name"]] = (p.input_per_mtok / 1e6, p.cached_input / 1e6, p.output_per_mtok / 1e6)
    return out


def turn_cost(prices: Prices, t: Turn, cached: int) -> float:
    i, c, o = prices[t.model]
    return (t.prompt - cached) * i + cached * c + t.completion * o


def bound_costs(prices: Prices, session: list[Turn]) -> tuple[float, float]:
    """Two bounds on the session's turns, on the models they went to.

    ``kept``: each turn reads cached what its model served last in this session (a cache
    that never evicts): the least caching saves for these choices of model.
    ``free_switch``: each turn reads the turn before's whole prompt cached, whichever model
    served it: as if a switch of model cost nothing. The gap between the two is what the
    session's switches cost."""
    kept = free = 0.0
    before, last = 0, dict[str, int]()
    for t in session:
        cap = t.prompt - 1                       # an upstream computes a token at least
        kept += turn_cost(prices, t, max(t.cached, min(last.get(t.model, 0), cap)))
        free += turn_cost(prices, t, max(t.cached, min(before, cap)))
        before = last[t.model] = t.prompt
    return kept, free


def summarize(policy: str, plan: SessionPlan, runs: list[list[Turn]], spent: float,
              prices: Prices) -> dict[str, Any]:
    turns = [t for session in runs for t in session]
    answered = [t for t in turns if t.ok]
    done = [s for s in runs if s and all(t.ok for t in s)]
    # Between the models that answered: a failed turn is no switch (nor a model used).
    switches = [sum(a.model != b.model for a, b in zip(ok, ok[1:], strict=False))
                for s in runs if (ok := [t for t in s if t.ok])]
    prompt = sum(t.prompt for t in turns)
    ttfts = [t.ttft_s for t in turns if t.ttft_s is not None]
    # Over every session's turns, as the ledger is, and per completed session likewise.
    usage_cost = sum(turn_cost(prices, t, t.cached) for t in turns if t.ok)
    bounds = [bound_costs(prices, [t for t in s if t.ok]) for s in runs]
    kept, free = sum(b[0] for b in bounds), sum(b[1] for b in bounds)

    def per_session(usd: float) -> float | None:
        return round(usd / len(done), 6) if done else None
    return {
        "scenario": "agent_sessions", "policy": policy, "sessions": len(runs),
        "completed_sessions": len(done), "turns": len(turns),
        "cost_usd": round(spent, 6),
        "cost_per_completed_session_usd": round(spent / len(done), 6) if done else None,
        # From the answers' usage at the configured prices (the ledger also has the attempts
        # an escalation replaced), and the same turns under the two bounds of bound_costs.
        "usage_cost_per_completed_session_usd": per_session(usage_cost),
        "kept_cache_cost_per_completed_session_usd": per_session(kept),
        "free_switch_cost_per_completed_session_usd": per_session(free),
        "prefix_cache_hit_rate": round(sum(t.cached for t in turns) / prompt, 4) if prompt else None,
        "model_switches_per_session": round(sum(switches) / len(switches), 2) if switches else None,
        # Of every turn sent: one that failed met no target, under any policy.
        "quality_target_met": round(sum(t.ok and (t.reason in QUALITY_MET or policy == "large")
                                        for t in turns) / len(turns), 4) if turns else None,
        "models": {m: sum(t.model == m for t in answered)
                   for m in sorted({t.model for t in answered})},
        # What ended the sessions that did not finish: status and error code, once retried.
        "failures": {f: sum(t.reason == f for t in turns if not t.ok)
                     for f in sorted({t.reason for t in turns if not t.ok})},
        # Each session's models, turn by turn, by initial (s, m, l; - for a failed turn).
        "model_sequences": ["".join(t.model[:1] if t.ok else "-" for t in s) for s in runs],
        "pools": {"interactive": {"ttft_ms": quantiles_ms(ttfts)}},
        "plan": {"quality": plan.quality},
    }


async def _drive(gw: Any, plan: SessionPlan, builder: PromptBuilder, t0: float
                 ) -> tuple[list[list[Turn]], float]:
    key = gw.keys["interactive"]
    work = sessions(plan, builder)
    limits = httpx.Limits(max_connections=len(work) + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        runs = await asyncio.gather(*(run_session(client, gw.url, key, s, builder,
                                                  plan, t0) for s in work))
    await asyncio.sleep(0.5)               # the last settles
    return list(runs), await _spent(gw.url, key)


async def agent_sessions(quick: bool, tmp: Path, builder: PromptBuilder,
                         policies: tuple[str, ...] = POLICIES) -> list[dict[str, Any]]:
    """Every policy side by side: one gateway (and simulated fleet) each, started first,
    then the same sessions sent to all at the same times."""
    plan = QUICK if quick else FULL
    configs = {p: policy_config(p, tmp / p) for p in policies}
    with contextlib.ExitStack() as stack:
        gws = {p: stack.enter_context(gateway_process(configs[p], tmp / p)) for p in policies}
        print(f"  agent_sessions {', '.join(policies)} side by side, sessions={plan.sessions}",
              flush=True)
        t0 = time.monotonic()
        results = await asyncio.gather(*(_drive(gws[p], plan, builder, t0) for p in policies))
    rows = [summarize(p, plan, runs, spent, prices_of(configs[p]))
            for p, (runs, spent) in zip(policies, results, strict=True)]
    paired([runs for runs, _ in results], [prices_of(configs[p]) for p in policies], rows)
    return rows


def paired(runs: list[list[list[Turn]]], prices: list[Prices], rows: list[dict[str, Any]]
           ) -> None:
    """Per policy, the cost per session over the sessions every policy completed, from the
    answers' usage at its prices: where policies complete different sessions (a turn that
    waited past AGENT_WAIT_S under one), the cost per completed session compares
    different work, and this the same."""
    n = min(len(r) for r in runs) if runs else 0
    common = [i for i in range(n)
              if all(r[i] and all(t.ok for t in r[i]) for r in runs)]
    for session_runs, price, row in zip(runs, prices, rows, strict=True):
        usd = sum(turn_cost(price, t, t.cached) for i in common for t in session_runs[i])
        row["sessions_completed_by_all"] = len(common)
        row["cost_per_session_completed_by_all_usd"] = (round(usd / len(common), 6)
                                                        if common else None)


def targets(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """cache_aware at most 0.7x cache_blind per completed session, the same share of
    turns meeting their target, and an interactive p95 TTFT no worse."""
    by = {r["policy"]: r for r in runs if r["scenario"] == "agent_sessions"}
    aware, blind = by.get("cache_aware"), by.get("cache_blind")
    if not aware or not blind:
        return {}
    c0, c1 = blind["cost_per_completed_session_usd"], aware["cost_per_completed_session_usd"]
    p0 = blind["pools"]["interactive"]["ttft_ms"]["p95"]
    p1 = aware["pools"]["interactive"]["ttft_ms"]["p95"]
    ratio = round(c1 / c0, 3) if c0 and c1 else None
    u0 = blind.get("usage_cost_per_completed_session_usd")
    a0 = blind.get("cost_per_session_completed_by_all_usd")
    a1 = aware.get("cost_per_session_completed_by_all_usd")

    def of_blind(key: str) -> float | None:
        b = blind.get(key)
        return round(b / u0, 3) if b and u0 else None
    return {"agent_sessions_cost_ratio": ratio,
            # The same sessions: those every policy completed.
            "agent_sessions_paired_cost_ratio": round(a1 / a0, 3) if a0 and a1 else None,
            # cache_blind's own turns: with a cache that never evicts, and with switches free.
            "agent_sessions_blind_kept_cache_ratio": of_blind(
                "kept_cache_cost_per_completed_session_usd"),
            "agent_sessions_blind_free_switch_ratio": of_blind(
                "free_switch_cost_per_completed_session_usd"),
            "agent_sessions_quality": (aware["quality_target_met"], blind["quality_target_met"]),
            "agent_sessions_p95_ttft_ms": (p1, p0),
            "agent_sessions_met": ratio is not None and ratio <= 0.7
            and aware["quality_target_met"] >= blind["quality_target_met"]
            and (p1 or 0) <= (p0 or 0) * 1.05}
