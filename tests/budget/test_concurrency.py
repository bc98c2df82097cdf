"""Many replicas, many concurrent requests, one hard limit: never crossed, billed exactly."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from budget.nanousd import usd
from budget.redis_client import open_redis
from core.budget_config import Limits
from core.errors import QuotaExceeded
from tests.budget.conftest import SHARED_REDIS, make_store

REQUESTS = 500
REPLICAS = 3


def _check(report: dict, settled: list[int], rejected: list[QuotaExceeded], hard: int) -> None:
    assert settled and rejected, (len(settled), len(rejected))
    assert len(settled) + len(rejected) == REQUESTS
    spent = report["spent_today_nanousd"]
    assert spent == sum(settled)  # exact to the nano-dollar
    assert spent <= hard
    assert report["spent_month_nanousd"] == spent
    assert report["reserved_usd"] == 0
    ledger = report["ledger"]
    assert [r["model"] for r in ledger] == ["m"]
    assert ledger[0]["requests"] == len(settled)
    assert ledger[0]["cost_nanousd"] == spent
    assert ledger[0]["output_tokens"] == 20 * len(settled)
    per_key = sum(usd_k["spent_today_usd"] for usd_k in report["keys"].values())
    assert abs(per_key - usd(spent)) < 1e-9
    assert rejected[0].error_type == "insufficient_quota"
    assert "daily hard budget" in rejected[0].message


async def _race(prefix: str, tmp_path: Path) -> None:
    rng = random.Random(42)
    worst = [rng.randint(1_000_000, 5_000_000) for _ in range(REQUESTS)]
    actual = [rng.randint(0, w) for w in worst]
    hard = int(sum(worst) * 0.3)
    limits = Limits(daily_hard_usd=usd(hard), monthly_hard_usd=usd(hard) * 10)
    handles = [await open_redis(SHARED_REDIS, tmp_path) for _ in range(REPLICAS)]
    stores = [
        make_store(h.client, prefix, tmp_path / f"r{i}", replica=f"r{i}") for i, h in enumerate(handles)
    ]
    settled: list[int] = []
    rejected: list[QuotaExceeded] = []

    async def one(i: int) -> None:
        store = stores[i % REPLICAS]
        try:
            res = await store.reserve(
                request_id=f"req-{i}",
                team="race",
                team_limits=limits,
                key_id=f"k{i % 4}",
                key_limits=None,
                model="m",
                max_cost_nanousd=worst[i],
                max_tokens=100,
            )
        except QuotaExceeded as exc:
            rejected.append(exc)
            return
        await asyncio.sleep(rng.random() * 0.02)  # the "upstream call"
        await store.settle(res, input_tokens=10, output_tokens=20, cost_nanousd=actual[i])
        settled.append(actual[i])

    try:
        await asyncio.gather(*(one(i) for i in range(REQUESTS)))
        report = await stores[0].usage("race", limits)
    finally:
        for h in handles:
            await h.close()

    _check(report, settled, rejected, hard)


def test_concurrent_replicas_never_cross_the_hard_limit(prefix: str, tmp_path: Path) -> None:
    asyncio.run(_race(prefix, tmp_path))
