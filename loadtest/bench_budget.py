"""Micro-benchmark of the budget store's request-path cost: reserve + settle.

    python loadtest/bench_budget.py                       # local Redis, c=1 and c=32
    python loadtest/bench_budget.py --url redis://h:6379 --pairs 5000 --concurrency 1 8 64

Each "pair" is what one gateway request pays: one reserve (EVALSHA) before
the upstream call and one settle (EVALSHA) after it, with team and key
limits set so every check runs. Keys use a unique prefix and are deleted at
the end. Prints p50/p99 per call and calls/s (2 calls per pair).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from budget.redis_client import open_redis
from budget.store import BudgetStore
from core.budget_config import BudgetSettings, Limits

TEAM_LIMITS = Limits(daily_hard_usd=1e6, daily_soft_usd=1e5, monthly_hard_usd=4e6, rpm=10**9, tpm=10**12)
KEY_LIMITS = Limits(daily_hard_usd=1e6, rpm=10**9)


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


async def _level(store: BudgetStore, pairs: int, concurrency: int) -> None:
    reserve_s: list[float] = []
    settle_s: list[float] = []
    counter = iter(range(pairs))

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            res = await store.reserve(
                request_id=f"b{concurrency}-{i}",
                team=f"team{i % 8}",
                team_limits=TEAM_LIMITS,
                key_id="bench",
                key_limits=KEY_LIMITS,
                model="small",
                max_cost_nanousd=50_000,
                max_tokens=600,
            )
            t1 = time.perf_counter()
            await store.settle(res, input_tokens=100, output_tokens=200, cost_nanousd=12_345)
            t2 = time.perf_counter()
            reserve_s.append(t1 - t0)
            settle_s.append(t2 - t1)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    for name, values in (("reserve", reserve_s), ("settle", settle_s)):
        print(
            f"  c={concurrency:<3} {name:8} p50 {_pct(values, 50):6.3f} ms   p99 {_pct(values, 99):6.3f} ms"
        )
    print(
        f"  c={concurrency:<3} {2 * pairs / wall:8.0f} calls/s   {pairs / wall:8.0f} reserve+settle pairs/s"
    )


async def main(args: argparse.Namespace) -> None:
    prefix = f"rgbench-{uuid.uuid4().hex[:10]}"
    handle = await open_redis(args.url, Path(tempfile.mkdtemp()))
    store = BudgetStore(
        handle.client,
        BudgetSettings(key_prefix=prefix),
        replica_id="bench",
        data_dir=Path(tempfile.mkdtemp()),
        scripts_client=handle.scripts,  # the pipelined client, as the gateway uses
    )
    try:
        await _level(store, 200, 8)  # warm up: connections, script load
        for concurrency in args.concurrency:
            await _level(store, args.pairs, concurrency)
    finally:
        keys = [k async for k in handle.client.scan_iter(match="{" + prefix + ":*", count=1000)]
        for i in range(0, len(keys), 500):
            await handle.client.delete(*keys[i : i + 500])
        await handle.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    asyncio.run(main(parser.parse_args()))
