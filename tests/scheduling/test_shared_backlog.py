"""The fleet's prefill backlog in Redis (scheduling/shared_backlog.py): two
replicas' on-time admissions see each other's prompts at once, without a
heartbeat, on a real Redis and a real Redis Cluster."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from core.config import ModelConfig, Price
from core.errors import ServiceUnavailable
from core.types import LiveStats
from scheduling.scheduler import PoolScheduler, share_backlogs
from scheduling.shared_backlog import SharedBacklog, backlog_key
from tests.budget.servers import RedisClusterNodes

RATE = 1000.0    # prompt tokens prefilled per second: 300 tokens take 0.3 s


def replica(client: aioredis.Redis | None, prefix: str) -> PoolScheduler:
    model = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                        scheduler={"max_concurrency": 8, "refuse_late": True})  # type: ignore[arg-type]
    s = PoolScheduler(model, LiveStats(), slo_ttft_s=0.45)
    s.stats.prefill_tokens_per_s, s.stats.learned_at = RATE, time.monotonic()   # just learned
    s.share(2)                      # two replicas front the model
    if client is not None:
        s.shared = SharedBacklog(client, prefix, "m")
    return s


@contextlib.asynccontextmanager
async def real_redis() -> AsyncIterator[tuple[aioredis.Redis, str]]:
    """The shared Redis and a fresh key prefix; the model's counter is deleted after."""
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    prefix = f"rgtest-{uuid.uuid4().hex[:8]}"
    try:
        yield client, prefix
    finally:
        await client.delete(backlog_key(prefix, "m"))
        await client.aclose()


async def held_tokens(client: aioredis.Redis, prefix: str) -> float:
    return float(await client.hget(backlog_key(prefix, "m"), "tokens") or 0)


def test_a_replica_sees_the_others_admission_at_once_and_refuses_a_late_start() -> None:
    async def body() -> None:
        async with real_redis() as (client, prefix):
            a, b = replica(client, prefix), replica(client, prefix)
            first = await a.acquire("interactive", 300, 5.0)     # 0.3 s: on time
            assert first.ahead == 0.0
            # B has no heartbeat from A: only Redis tells it A's 300 tokens are
            # ahead, and 300 + 300 tokens at 1,000/s start past the 0.45 s SLO.
            with pytest.raises(ServiceUnavailable) as refused:
                await b.acquire("interactive", 300, 5.0)
            assert refused.value.code == "slo_unreachable"
            await asyncio.sleep(0.05)                             # the refusal is taken back
            assert 100 < await held_tokens(client, prefix) <= 300
            # A short prompt still fits behind A's, and learns from the real queue.
            second = await b.acquire("interactive", 50, 5.0)
            assert 100 < second.ahead <= 300
            # Without the shared backlog, B would have admitted the late one.
            alone = replica(None, prefix)
            late = await alone.acquire("interactive", 300, 5.0)
            assert late.ahead == 0.0
            for s, t in ((a, first), (b, second), (alone, late)):
                s.release(t)
    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_waiter_given_a_slot_counts_itself_in_redis_and_sees_the_others() -> None:
    async def body() -> None:
        async with real_redis() as (client, prefix):
            a, b = replica(client, prefix), replica(client, prefix)
            b.stats.observe_slot(0.1)                 # a queue of one waits about 25 ms
            held = [await b.acquire("interactive", 10, 5.0) for _ in range(4)]  # B's share
            waiter = asyncio.ensure_future(b.acquire("interactive", 20, 5.0))
            await asyncio.sleep(0.02)
            assert b.interactive.queued == 1
            other = await a.acquire("interactive", 300, 5.0)   # A's prompt, unknown to B
            b.release(held.pop())
            woken = await waiter
            # Its prefill is learned against every replica's backlog, A's 300 included
            # (drained at 1,000 tokens/s since), not against B's own figures alone.
            assert 250 < woken.ahead <= 340
            assert 250 < await held_tokens(client, prefix) <= 360      # its 20 are counted
            for s, t in ((a, other), (b, woken), *((b, t) for t in held)):
                s.release(t)
    asyncio.run(asyncio.wait_for(body(), 20))


def test_the_switch_turns_it_off_and_it_is_only_for_on_time_admission() -> None:
    def scheduler(**knobs: bool) -> PoolScheduler:
        model = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                            scheduler={"max_concurrency": 8, **knobs})  # type: ignore[arg-type]
        return PoolScheduler(model, LiveStats(), slo_ttft_s=0.45)

    schedulers = {"on": scheduler(refuse_late=True), "off": scheduler(refuse_late=True,
                                                                      shared_backlog=False),
                  "queues": scheduler()}
    share_backlogs(schedulers, aioredis.Redis.from_url("redis://127.0.0.1:6379/0"), "rg")
    assert isinstance(schedulers["on"].shared, SharedBacklog)
    assert schedulers["off"].shared is None and schedulers["queues"].shared is None


def test_the_backlog_drains_at_the_rate_and_one_replica_makes_no_call() -> None:
    async def body() -> None:
        async with real_redis() as (client, prefix):
            shared = SharedBacklog(client, prefix, "m")
            assert await shared.add(400, RATE) == 0.0
            await asyncio.sleep(0.2)                              # 200 tokens drained
            ahead = await shared.add(0, RATE)
            assert ahead is not None and 150 < ahead < 210
            assert 0 < await client.ttl(backlog_key(prefix, "m")) <= 60
            s = replica(client, prefix + "-one")
            s.share(1)
            t = await s.acquire("interactive", 100, 5.0)
            await asyncio.sleep(0.05)
            assert not await client.exists(backlog_key(prefix + "-one", "m"))
            s.release(t)
    asyncio.run(asyncio.wait_for(body(), 20))


def test_an_unreachable_redis_falls_back_to_the_heartbeat_within_the_bound() -> None:
    async def body() -> None:
        # Nothing listens on port 1: every call fails, and admission goes on.
        client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=5)
        try:
            s = replica(client, "rgtest-down")
            started = time.monotonic()
            t = await s.acquire("interactive", 300, 5.0)
            assert time.monotonic() - started < 0.5
            assert s.shared is not None and s.shared.failing
            s.release(t)
        finally:
            await client.aclose()
    asyncio.run(asyncio.wait_for(body(), 20))


def test_the_shared_backlog_on_a_real_cluster(tmp_path: Path) -> None:
    async def body(url: str) -> None:
        client = RedisCluster.from_url(url)
        try:
            # The script runs on every node; the 0.1 s bound is for the request path,
            # not for a cluster just started on a loaded machine (discovery, SCRIPT LOAD).
            shared = [SharedBacklog(client, "rgc", f"model-{i}", timeout_s=5.0) for i in range(6)]
            for s in shared:
                assert await s.add(100, 1.0) == 0.0
                ahead = await s.add(100, 1.0)
                assert ahead is not None and 99 < ahead <= 100
            slots = {client.keyslot(s.key) for s in shared}
            assert len(slots) > 1                 # the models' keys spread over the nodes
        finally:
            await client.aclose()
    with RedisClusterNodes(tmp_path) as nodes:
        asyncio.run(asyncio.wait_for(body(nodes.url.replace("redis+cluster://", "redis://")), 60))
