"""What a run cost, from the gateway's own books (``GET /v1/usage``), not the client's.

    before = await ledger(session, url, key)
    ...                                        # the run
    spent = ledger_delta(before, await ledger(session, url, key))
    spent["small"]    # {"requests": 812, "input_tokens": ..., "output_tokens": ..., "cost_usd": ..}

The gateway bills every attempt: a failed-over or escalated request pays for
the answers it threw away, which a client adding up its usage chunks never
sees. So cost per completed task is the team's ledger delta over the run
divided by the requests that completed. Energy is the same ledger's tokens
times each model's ``energy_j_per_token``, when the fleet's config is known.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

Ledger = dict[str, dict[str, float]]
_FIELDS = ("requests", "input_tokens", "output_tokens", "cost_usd")


async def ledger(session: aiohttp.ClientSession, url: str, key: str) -> Ledger:
    """The team's ledger of the last two days (a run may straddle midnight), per model."""
    async with session.get(url + "/v1/usage", params={"days": "2"},
                           headers={"authorization": f"Bearer {key}"}) as resp:
        resp.raise_for_status()
        report = await resp.json()
    out: Ledger = {}
    for row in report.get("ledger", []):
        acc = out.setdefault(row["model"], dict.fromkeys(_FIELDS, 0.0))
        for name in _FIELDS:
            acc[name] += float(row.get(name, 0))
    return out


def ledger_delta(before: Ledger, after: Ledger) -> Ledger:
    out: Ledger = {}
    for model, row in after.items():
        prev = before.get(model, {})
        delta = {k: row[k] - prev.get(k, 0.0) for k in _FIELDS}
        if any(delta.values()):
            out[model] = delta
    return out


async def ledgers(url: str, keys: dict[str, str]) -> dict[str, Ledger]:
    """One ledger per pool key (each pool runs as its own team in the experiment)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        pairs = await asyncio.gather(*(ledger(session, url, key) for key in keys.values()))
    return dict(zip(keys, pairs, strict=True))


def spend(delta: Ledger, energy_j_per_token: dict[str, float] | None) -> dict[str, Any]:
    """Totals of one ledger delta: cost, energy (None when unknown), per model."""
    cost = sum(row["cost_usd"] for row in delta.values())
    energy = None
    if energy_j_per_token is not None:
        energy = sum((row["input_tokens"] + row["output_tokens"]) * energy_j_per_token.get(m, 0.0)
                     for m, row in delta.items())
    return {"cost_usd": round(cost, 8), "energy_j": None if energy is None else round(energy, 1),
            "billed_requests": int(sum(row["requests"] for row in delta.values())),
            "models": {m: {k: round(v, 8) for k, v in row.items()} for m, row in delta.items()}}
