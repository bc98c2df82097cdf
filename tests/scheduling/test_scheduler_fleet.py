"""Gateway replicas share a model's max_concurrency through a real Redis."""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
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


def test_replicas_see_each_others_load_through_the_heartbeat() -> None:
    async def body() -> None:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        prefix = f"rgtest-{uuid.uuid4().hex[:8]}"
        a, b = scheduler(), scheduler()
        share_a = FleetShare(client, prefix, "a", {"m": a})
        share_b = FleetShare(client, prefix, "b", {"m": b})
        try:
            await share_a.beat()
            await share_b.beat()
            await share_a.beat()
            assert a.stats.peer_at == 0 or a.stats.peer_admitted == 0   # b runs nothing yet
            b.stats.prefill_tokens_per_s = 5000.0          # a learned prefill rate,
            b.stats.learned_at = time.monotonic()          # learned just now
            tickets = [await b.acquire("interactive", 2000, timeout=1) for _ in range(3)]
            assert b.stats.backlog_tokens == pytest.approx(6000, abs=50)
            await share_b.beat()            # b reports 3 admitted, ~6000 tokens to prefill
            await share_a.beat()            # ... and a takes it
            now = time.monotonic()
            assert a.stats.peers_fresh(now) and a.stats.peer_admitted == 3
            rate = 5000.0
            assert 0 < a.stats.fleet_backlog(rate, now) <= 6000
            assert a.stats.running() == 3                      # the batch a request joins
            alone = LiveStats().predicted_ttft_s(500, rate)
            assert a.stats.predicted_ttft_s(500, rate) > alone  # the peer's prompts are ahead
            # 9 slots for the fleet, 5 each; b holds 3, so 6 are free, 3 of them a's
            # part: under its own share, which stays its own.
            assert a._limit() == 5
            for t in tickets:
                b.release(t)
            await share_b.beat()
            a.stats.peer_at = time.monotonic() - 5             # stale: a's own figures only
            assert a.stats.fleet_backlog(rate, time.monotonic()) == 0
            assert a.stats.running() == 0
            # A malformed or oversized report from a replica is ignored, not fatal.
            await client.hset(share_a.load_key, "c", b"not json")
            await client.hset(share_a.load_key, "d", orjson.dumps(
                {"at": time.time(), "models": {"m": [float("1e300"), -1]}}))
            await share_a.beat()
            assert a.stats.peer_admitted == 0
        finally:
            await client.delete(share_a.key, share_a.load_key)
            await client.aclose()
    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_replica_borrows_its_share_of_what_its_peers_leave_free() -> None:
    s = scheduler()                       # 9 for the fleet
    s.share(2)                            # 5 each
    s.stats.take_peers(0.0, 1.0, time.monotonic())   # the other replica runs 1
    # 9 - 0 (ours) - 1 (theirs) = 8 free at the report: half of them are ours.
    assert s._limit() == 5
    s.stats.take_peers(0.0, 0.0, time.monotonic())
    assert s._limit() == 5               # 9 free, 4 ours by the split: never below the share
    s.configured = 20
    s.stats.take_peers(0.0, 2.0, time.monotonic())
    assert s._limit() == 9               # 18 free: 9 ours
    s.stats.take_peers(0.0, 2.0, time.monotonic() - 5)
    assert s._limit() == 5               # stale: the static share
