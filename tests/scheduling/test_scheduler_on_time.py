"""On-time admission (``scheduler.refuse_late``): interactive work that the
SLO cannot cover is refused at once, and a waiter gives up when it can no
longer start on time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from core.config import ModelConfig, Price
from core.errors import ServiceUnavailable
from core.types import LiveStats
from scheduling.scheduler import PoolScheduler

SLO_TTFT_S = 0.45


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 20))


def scheduler(limit: int, **cfg: Any) -> PoolScheduler:
    model = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                        simulate={"prefill_tokens_per_s": 10_000},   # type: ignore[arg-type]
                        scheduler={"max_concurrency": limit, **cfg})  # type: ignore[arg-type]
    return PoolScheduler(model, LiveStats(), slo_ttft_s=SLO_TTFT_S)


def test_a_request_that_would_queue_past_the_slo_is_refused_at_once() -> None:
    async def body() -> None:
        s = scheduler(1, refuse_late=True)
        s.stats.slot_s = 2.0                          # the one slot frees in ~2 s
        held = await s.acquire("interactive", 0, 1.0)
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as late:
            await s.acquire("interactive", 0, 5.0)
        assert time.monotonic() - started < 0.1       # refused, not queued
        assert late.value.code == "slo_unreachable" and "retry-after" in late.value.headers
        assert s.interactive.queued == 0
        s.release(held)
    run(body)


def test_a_prefill_backlog_past_the_slo_refuses_even_with_a_free_slot() -> None:
    async def body() -> None:
        s = scheduler(8, refuse_late=True)            # 10,000 prompt tokens/s
        long = await s.acquire("interactive", 4000, 1.0)             # 0.4 s of prefill
        with pytest.raises(ServiceUnavailable) as late:
            await s.acquire("interactive", 1000, 1.0)                # would start at 0.5 s
        assert late.value.code == "slo_unreachable"
        short = await s.acquire("interactive", 200, 1.0)             # 0.42 s: on time
        for t in (long, short):
            s.release(t)
        assert s.active == 0
    run(body)


def test_a_waiter_gives_up_once_it_can_no_longer_start_on_time() -> None:
    async def body() -> None:
        s = scheduler(1, refuse_late=True)
        s.stats.slot_s = 0.1                          # predicted to start within the SLO
        held = await s.acquire("interactive", 0, 1.0)
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as late:
            await s.acquire("interactive", 500, 5.0)  # the slot is never freed
        waited = time.monotonic() - started
        assert late.value.code == "queue_timeout"
        assert SLO_TTFT_S - 0.05 - 0.02 < waited < SLO_TTFT_S   # the SLO less its prefill
        s.release(held)
        assert s.active == 0 and not s.interactive.waiters
    run(body)


def test_off_by_default_a_late_request_queues() -> None:
    async def body() -> None:
        s = scheduler(1)
        s.stats.slot_s = 2.0
        held = await s.acquire("interactive", 0, 1.0)
        waiting = asyncio.create_task(s.acquire("interactive", 0, 5.0))
        await asyncio.sleep(0.6)                      # past the SLO, still waiting
        assert not waiting.done() and s.interactive.queued == 1
        s.release(held)
        s.release(await waiting)
    run(body)


def test_a_request_that_would_slow_the_batch_past_the_tpot_slo_is_refused() -> None:
    async def body() -> None:
        model = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                            simulate={"tpot_ms": 32, "batch_slowdown": 0.05,   # type: ignore[arg-type]
                                      "max_batch": 8},
                            scheduler={"refuse_late": True})  # type: ignore[arg-type]
        s = PoolScheduler(model, LiveStats(), slo_ttft_s=SLO_TTFT_S, slo_tpot_s=0.04)
        # 32 ms x (1 + 0.05 x 5) = 40 ms for a sixth sequence; a seventh makes it 41.6.
        tickets = [await s.acquire("interactive", 0, 1.0) for _ in range(6)]
        with pytest.raises(ServiceUnavailable) as slow:
            await s.acquire("interactive", 0, 1.0)
        assert slow.value.code == "slo_unreachable" and "TPOT" in str(slow.value)
        for t in tickets:
            s.release(t)
        assert s.active == 0
    run(body)
