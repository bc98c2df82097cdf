"""PoolScheduler on a real event loop: who goes first, batch backing off,
queue limits and deadlines, and every way a slot comes back."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from backends.sse import SSEEvent
from core.config import ModelConfig, Price
from core.errors import RateLimited, ServiceUnavailable, UpstreamError
from core.types import LiveStats
from core.usage import Usage
from scheduling.scheduler import PoolScheduler, ScheduledStream

SLO_TTFT_S = 0.45


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 20))   # never hangs the suite


def scheduler(limit: int = 2, **cfg: Any) -> PoolScheduler:
    model = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                        simulate={"prefill_tokens_per_s": 10_000},   # type: ignore[arg-type]
                        scheduler={"max_concurrency": limit, **cfg})  # type: ignore[arg-type]
    return PoolScheduler(model, LiveStats(), slo_ttft_s=SLO_TTFT_S)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_uncontended_admission_is_immediate_and_counted() -> None:
    async def body() -> None:
        s = scheduler(limit=2)
        t = await s.acquire("interactive", 10, 1.0)
        assert (s.active, s.interactive.in_flight, s.stats.admitted) == (1, 1, 1)
        s.release(t)
        s.release(t)                                  # twice: still one release
        assert (s.active, s.interactive.in_flight) == (0, 0)
    run(body)


def test_interactive_is_admitted_before_batch_that_queued_first() -> None:
    async def body() -> None:
        s = scheduler(limit=1, batch_reserve=0.0)
        held = await s.acquire("interactive", 10, 1.0)
        order: list[str] = []

        async def one(pool: str) -> None:
            t = await s.acquire(pool, 10, 5.0)
            order.append(pool)
            await asyncio.sleep(0)
            s.release(t)

        batch = asyncio.create_task(one("batch"))
        await settle()
        interactive = asyncio.create_task(one("interactive"))
        await settle()
        assert (s.interactive.queued, s.batch.queued) == (1, 1)
        assert (s.stats.queued, s.stats.queued_batch) == (1, 1)
        s.release(held)
        await asyncio.gather(batch, interactive)
        assert order == ["interactive", "batch"]
        assert s.active == 0
    run(body)


def test_batch_never_takes_the_reserved_slots() -> None:
    async def body() -> None:
        s = scheduler(limit=4, batch_reserve=0.25)      # batch may hold 3 of 4
        tickets = [await s.acquire("batch", 0, 1.0) for _ in range(3)]
        with pytest.raises(ServiceUnavailable):
            await s.acquire("batch", 0, 0.05)           # a slot is free, but reserved
        vip = await s.acquire("interactive", 0, 0.05)   # interactive gets it at once
        for t in [*tickets, vip]:
            s.release(t)
        assert s.active == 0
    run(body)


def test_batch_backs_off_when_predicted_interactive_ttft_nears_the_slo() -> None:
    async def body() -> None:
        s = scheduler(limit=8, batch_reserve=0.0, batch_backoff=0.5)
        # 10,000 tokens/s: a 4,000-token prompt in prefill means 0.4 s for the
        # next interactive request, past half the 450 ms SLO.
        long = await s.acquire("interactive", 4000, 1.0)
        with pytest.raises(ServiceUnavailable) as refused:
            await s.acquire("batch", 100, 0.05)
        assert refused.value.code == "queue_timeout"
        s.release(long)
        idle = await s.acquire("batch", 4000, 0.05)     # an idle model takes batch regardless
        s.release(idle)
    run(body)


def test_a_full_queue_is_refused_at_once_with_429_and_retry_after() -> None:
    async def body() -> None:
        s = scheduler(limit=1, interactive_queue=1)
        held = await s.acquire("interactive", 0, 1.0)
        waiting = asyncio.create_task(s.acquire("interactive", 0, 5.0))
        await settle()
        with pytest.raises(RateLimited) as full:
            await s.acquire("interactive", 0, 5.0)
        assert full.value.status_code == 429 and full.value.code == "queue_full"
        assert int(full.value.headers["retry-after"]) >= 1
        s.release(held)
        s.release(await waiting)
        assert s.active == 0 and s.interactive.queued == 0
    run(body)


def test_waiting_past_the_deadline_is_a_503_with_retry_after_and_leaves_the_queue() -> None:
    async def body() -> None:
        s = scheduler(limit=1, interactive_wait_s=0.1)
        held = await s.acquire("interactive", 0, 1.0)
        with pytest.raises(ServiceUnavailable) as late:
            await s.acquire("interactive", 0, 30.0)      # the pool's 0.1 s wins
        assert late.value.status_code == 503 and late.value.code == "queue_timeout"
        assert "retry-after" in late.value.headers
        assert s.interactive.queued == 0 and not s.interactive.waiters
        s.release(held)
        assert s.active == 0
    run(body)


def test_a_cancelled_waiter_gives_its_place_up() -> None:
    async def body() -> None:
        s = scheduler(limit=1)
        held = await s.acquire("interactive", 0, 1.0)
        waiter = asyncio.create_task(s.acquire("interactive", 0, 5.0))
        await settle()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert s.interactive.queued == 0
        s.release(held)
        assert s.active == 0
    run(body)


class FakeUpstream:
    """A ChunkStream over fixed events; a real class, not a mock of one."""

    def __init__(self, events: int, fail_at: int | None = None) -> None:
        self.events = events
        self.fail_at = fail_at
        self.closed = False
        usage: Usage | None = None
        self.usage = usage
        self.prompt_seen: Usage | None = None
        self.ttft_s = 0.05
        self.tpot_s: float | None = 0.01
        self.buffered = False

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        for i in range(self.events):
            if i == self.fail_at:
                raise UpstreamError("model m broke off the stream", code="upstream_stream_truncated")
            yield SSEEvent.from_data({"choices": [{"index": 0, "delta": {"content": "x"}}]})

    async def aclose(self) -> None:
        self.closed = True


def test_a_stream_holds_its_slot_until_closed() -> None:
    async def body() -> None:
        s = scheduler(limit=1)
        stream = s.holding(await s.acquire("interactive", 100, 1.0), FakeUpstream(3))
        assert [e async for e in stream] and s.active == 1
        await stream.aclose()
        assert s.active == 0
        assert s.stats.prefill_tokens_per_s == pytest.approx(100 / 0.05)
    run(body)


def test_a_stream_teaches_the_prefill_rate_at_its_first_token_once() -> None:
    async def body() -> None:
        s = scheduler(limit=1)
        upstream = FakeUpstream(5)
        upstream.ttft_s = 0.0              # the first token has not arrived
        stream = s.holding(await s.acquire("interactive", 100, 1.0), upstream)
        events = aiter(stream)
        upstream.ttft_s = 0.05             # set as the relay sees it, with the first chunk
        await anext(events)
        # Learned now, while the stream still decodes: not seconds later at its end.
        assert s.stats.prefill_tokens_per_s == pytest.approx(100 / 0.05) and s.active == 1
        upstream.ttft_s = 0.5
        rest = [e async for e in events]
        await stream.aclose()
        assert len(rest) == 4 and s.active == 0
        assert s.stats.prefill_tokens_per_s == pytest.approx(100 / 0.05)   # once per request
    run(body)


def test_a_broken_stream_releases_and_counts_an_error() -> None:
    async def body() -> None:
        s = scheduler(limit=1)
        stream = s.holding(await s.acquire("interactive", 0, 1.0), FakeUpstream(3, fail_at=1))
        with pytest.raises(UpstreamError):
            async for _ in stream:
                pass
        await stream.aclose()
        assert s.active == 0 and s.stats.error_rate > 0
    run(body)


def test_a_stream_dropped_without_close_gives_its_slot_back() -> None:
    async def body() -> None:
        s = scheduler(limit=1)
        stream: ScheduledStream | None = s.holding(await s.acquire("interactive", 0, 1.0),
                                                   FakeUpstream(1))
        del stream
        gc.collect()
        assert s.active == 0
    run(body)


def test_a_standing_queue_serves_its_newest_first() -> None:
    async def body() -> None:
        s = scheduler(limit=1, interactive_lifo_after_s=0.0)   # any queue counts as standing
        held = await s.acquire("interactive", 0, 1.0)
        order: list[int] = []

        async def one(n: int) -> None:
            t = await s.acquire("interactive", 0, 5.0)
            order.append(n)
            await asyncio.sleep(0)
            s.release(t)

        tasks = []
        for n in range(3):
            tasks.append(asyncio.create_task(one(n)))
            await settle()
        assert s.stats.lifo                       # predictions know newcomers go first
        s.release(held)
        await asyncio.gather(*tasks)
        assert order == [2, 1, 0]
    run(body)
