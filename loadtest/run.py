"""One measured run: a trace sent at a gateway, summed up into one report row.

    row = await measure_run(target, trace, limits, slos, books=BookKeeping(keys, energy))
    row["pools"]["interactive"]["goodput_rps"], row["cost_per_completed_usd"]

The row holds the client's view per pool and per model (latency
percentiles, goodput, attainment, throughput), the gateway's books (cost and
energy per completed task, every attempt billed), and how busy the client
and the gateway's process were, which shows whether either was the
bottleneck rather than the fleet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadtest.books import ledger_delta, ledgers, spend
from loadtest.client import Result, RunLimits, Target, replay
from loadtest.prompts import PromptBuilder
from loadtest.stats import Slo, summarize
from loadtest.traces import TraceRequest

SETTLE_WAIT_S = 0.5      # settles are batched for a few ms; reservations expire on their own


@dataclass(frozen=True)
class BookKeeping:
    """Where the run's cost is read: one key per pool's team, and the energy table."""

    keys: dict[str, str]
    energy_j_per_token: dict[str, float] | None = None


def _unique_keys(keys: dict[str, str]) -> dict[str, str]:
    """One key per team: two pools sharing a key share a ledger, read once."""
    seen: dict[str, str] = {}
    for pool, key in keys.items():
        seen.setdefault(key, pool)
    return {pool: key for key, pool in seen.items()}


def _per_completed(total: float | None, done: int, digits: int) -> float | None:
    return round(total / done, digits) if total is not None and done else None


def _costs(delta: dict[str, Any], pools: dict[str, dict[str, Any]],
           energy: dict[str, float] | None) -> dict[str, Any]:
    """Run totals and, into each pool's figures, that pool's cost and energy per completed."""
    per_pool = {pool: spend(d, energy) for pool, d in delta.items()}
    for pool, books in per_pool.items():
        if pool in pools and len(per_pool) > 1:
            done = pools[pool]["completed"]
            pools[pool]["cost_usd"] = books["cost_usd"]
            pools[pool]["cost_per_completed_usd"] = _per_completed(books["cost_usd"], done, 8)
            pools[pool]["energy_per_completed_j"] = _per_completed(books["energy_j"], done, 2)
    completed = {p: s["completed"] for p, s in pools.items()}
    cost = sum(p["cost_usd"] for p in per_pool.values())
    joules = [p["energy_j"] for p in per_pool.values() if p["energy_j"] is not None]
    done = sum(completed.values())
    return {
        "cost_usd": round(cost, 8),
        "cost_per_completed_usd": round(cost / done, 8) if done else None,
        "energy_j": round(sum(joules), 1) if joules else None,
        "energy_per_completed_j": round(sum(joules) / done, 2) if joules and done else None,
        "books": per_pool,
    }


async def measure_run(target: Target, trace: list[TraceRequest], limits: RunLimits,
                      slos: dict[str, Slo | None], *, books: BookKeeping | None = None,
                      builder: PromptBuilder | None = None, progress: bool = True,
                      gateway_cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    keys = _unique_keys(books.keys) if books else {}
    before = await ledgers(target.url, keys) if keys else {}
    cpu0, gw0, wall0 = time.process_time(), gateway_cpu() if gateway_cpu else 0.0, time.time()
    results = await replay(target, trace, limits, builder=builder, progress=progress)
    wall = time.time() - wall0
    cpu = {"client_cpu": round((time.process_time() - cpu0) / wall, 3)}
    if gateway_cpu:
        cpu["gateway_cpu"] = round((gateway_cpu() - gw0) / wall, 3)
    window = min(limits.duration_s, max((r.sent_at for r in results), default=0.0)) or 1.0
    row: dict[str, Any] = summarize(results, window, slos)
    row.update(sent=len(results), window_s=round(window, 2), wall_s=round(wall, 1),
               offered_rps_measured=round(len(results) / window, 2), cpu_share=cpu)
    if keys:
        await asyncio.sleep(SETTLE_WAIT_S)
        after = await ledgers(target.url, keys)
        delta = {pool: ledger_delta(before[pool], after[pool]) for pool in keys}
        row.update(_costs(delta, row["pools"], books.energy_j_per_token if books else None))
    row["_results"] = results   # for the plots; dropped before report.json is written
    return row


def latencies(results: list[Result], pool: str) -> dict[str, list[float]]:
    """Raw per-request seconds of one pool, for CDF plots."""
    done = [r for r in results if r.completed and r.pool == pool]
    return {"ttft": [r.ttft_s for r in done if r.ttft_s is not None],
            "tpot": [t for r in done if (t := r.tpot_s) is not None],
            "e2e": [r.e2e_s for r in done if r.e2e_s is not None]}
