"""Gateway replicas share a model's max_concurrency through a real Redis."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis

from core.config import ModelConfig, Price
from core.errors import ServiceUnavailable
from core.types import LiveStats
from scheduling.fleet import FleetShare
from scheduling.scheduler import PoolScheduler


def scheduler() -> PoolScheduler:
    model = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                        scheduler={"max_concurrency": 9})   # type: ignore[arg-type]
    return PoolScheduler(model, LiveStats(), slo_ttft_s=0.45)


def test_replicas_split_the_limit_and_a_stopped_one_drops_out() -> None:
    async def body() -> None:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        prefix = f"rgtest-{uuid.uuid4().hex[:8]}"
        a, b = scheduler(), scheduler()
        share_a = FleetShare(client, prefix, "a", {"m": a}, window_s=0.5)
        share_b = FleetShare(client, prefix, "b", {"m": b}, window_s=0.5)
        try:
            await share_a.beat()
            assert await share_b.beat() == 2
            assert await share_a.beat() == 2
            assert (a.max_concurrency, b.max_concurrency) == (5, 5)   # ceil(9 / 2)
            assert a.stats.capacity == 5
            await asyncio.sleep(0.7)                  # b stops beating
            assert await share_a.beat() == 1 and a.max_concurrency == 9
            await share_a.leave()
            assert await client.zcard(share_a.key) == 0
        finally:
            await client.delete(share_a.key)
            await client.aclose()
    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_grown_share_admits_the_waiters_at_once() -> None:
    async def body() -> None:
        s = scheduler()
        s.share(9)                                    # one slot each
        held = await s.acquire("interactive", 0, 1.0)
        waiting = asyncio.create_task(s.acquire("interactive", 0, 5.0))
        await asyncio.sleep(0)
        assert s.interactive.queued == 1
        s.share(1)
        ticket = await waiting
        assert s.active == 2
        s.release(ticket)
        s.release(held)
    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_replica_borrows_its_share_of_what_the_upstream_reports_free() -> None:
    async def body() -> None:
        s = scheduler()                       # max_concurrency 9 for the fleet
        s.share(2)                            # two replicas: 5 each
        tickets = [await s.acquire("interactive", 10, timeout=1) for _ in range(5)]
        with pytest.raises(ServiceUnavailable):   # its share is full, and nothing is known
            await s.acquire("interactive", 10, timeout=0.05)
        # The upstream runs only these 5: 4 free, 2 of them this replica's to take.
        s.stats.take_upstream(5, 0, None, time.monotonic())
        tickets += [await s.acquire("interactive", 10, timeout=0.05) for _ in range(2)]
        with pytest.raises(ServiceUnavailable):
            await s.acquire("interactive", 10, timeout=0.05)
        s.stats.upstream_at = time.monotonic() - 10   # stale: back to the share
        for t in tickets[:3]:
            s.release(t)
        assert s.active == 4
        tickets = tickets[3:] + [await s.acquire("interactive", 10, timeout=0.05)]
        with pytest.raises(ServiceUnavailable):
            await s.acquire("interactive", 10, timeout=0.05)
        for t in tickets:
            s.release(t)

    asyncio.run(body())
