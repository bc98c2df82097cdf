"""Reserves of one tick go to Redis in one script call, judged in order as if one by one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from redis.exceptions import ResponseError

from budget.redis_client import open_redis
from budget.store import BudgetStore
from core.budget_config import Limits
from core.errors import QuotaExceeded, RateLimited
from tests.budget.conftest import make_store
from tests.budget.servers import RedisServer
from tests.budget.test_store import USD, reserve, run

AMOUNT = USD // 100


def _count_calls(store: BudgetStore) -> list[int]:
    """Spy on the reserve script: the size of each call's batch (ten ARGV per request)."""
    scripts = store._scripts
    real = scripts._reserve
    sizes: list[int] = []

    def spy(*, keys: list[str], args: list[Any]) -> Any:
        sizes.append((len(args) - 9) // 10)
        return real(keys=keys, args=args)

    scripts._reserve = spy
    return sizes


def test_a_tick_of_reserves_is_one_call_judged_in_order(tmp_path: Path, prefix: str) -> None:
    limits = Limits(daily_hard_usd=5 * AMOUNT / USD)

    async def body(store: BudgetStore, client: Any) -> None:
        sizes = _count_calls(store)
        outcomes = await asyncio.gather(
            *(reserve(store, f"r{i}", AMOUNT, limits=limits) for i in range(8)),
            return_exceptions=True)
        assert sizes == [8]
        assert [not isinstance(o, BaseException) for o in outcomes] == [True] * 5 + [False] * 3
        refused = outcomes[5]
        assert isinstance(refused, QuotaExceeded) and "daily hard budget" in refused.message
        usage = await store.usage("t", limits)
        assert usage["reserved_usd"] * USD == 5 * AMOUNT
        for i in range(5):   # the holds are real: each settles once, exactly
            held = outcomes[i]
            assert not isinstance(held, BaseException)
            await store.settle(held, input_tokens=1, output_tokens=1, cost_nanousd=7)
        usage = await store.usage("t", limits)
        assert (usage["reserved_usd"], usage["spent_today_nanousd"]) == (0, 35)

    run(tmp_path, prefix, body)


def test_a_batch_sees_its_own_rate_counts_keys_and_duplicates(tmp_path: Path, prefix: str) -> None:
    """Key limits apply per key inside one batch, the team's across keys, and a
    request id sent twice in one batch (a retried reserve) holds once."""
    team = Limits(rpm=5)
    per_key = Limits(rpm=2)

    async def body(store: BudgetStore, client: Any) -> None:
        sizes = _count_calls(store)
        calls = [reserve(store, f"a{i}", AMOUNT, limits=team, key="a", key_limits=per_key)
                 for i in range(3)]
        calls += [reserve(store, "b0", AMOUNT, limits=team, key="b", key_limits=per_key)
                  for _ in range(2)]
        calls += [reserve(store, f"c{i}", AMOUNT, limits=team, key="c") for i in range(3)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert sizes == [8]
        kinds = [type(o).__name__ for o in outcomes]
        # a0 a1 pass, a2 hits the key's rpm; b0 twice is one request; c0 c1 fill
        # the team's 5 (a0 a1 b0 c0 c1) and c2 hits the team's rpm.
        assert kinds == ["Reservation", "Reservation", "RateLimited", "Reservation",
                         "Reservation", "Reservation", "Reservation", "RateLimited"]
        assert isinstance(outcomes[2], RateLimited) and outcomes[2].headers["retry-after"]
        usage = await store.usage("t", team)
        assert usage["reserved_usd"] * USD == 5 * AMOUNT   # b0 held once
        # The next tick sees everything the batch recorded.
        try:
            await reserve(store, "late", AMOUNT, limits=team)
        except RateLimited:
            pass
        else:
            raise AssertionError("the team's rpm was full")

    run(tmp_path, prefix, body)


def test_a_settle_nobody_awaits_is_stored_by_close(tmp_path: Path, prefix: str) -> None:
    """settle() queues at once: a caller that never awaits it, or cancels its
    future (a client gone), loses nothing; aclose() waits for the batch."""
    async def body(store: BudgetStore, client: Any) -> None:
        held = [await reserve(store, f"s{i}", AMOUNT) for i in range(3)]
        store.settle(held[0], input_tokens=1, output_tokens=1, cost_nanousd=11)
        store.settle(held[1], input_tokens=1, output_tokens=1, cost_nanousd=13).cancel()
        waited = store.settle(held[2], input_tokens=1, output_tokens=1, cost_nanousd=17)
        await store.aclose()
        assert waited.done()
        usage = await store.usage("t", None)
        assert (usage["spent_today_nanousd"], usage["reserved_usd"]) == (41, 0)

    run(tmp_path, prefix, body)


def test_batches_survive_a_script_flush_and_report_script_errors(tmp_path: Path) -> None:
    """A batch is written straight to the pipelined connection: a Redis that forgot
    the script (restart, failover) gets it loaded again, and a Lua error reaches
    every request of the batch instead of leaving them waiting."""
    async def main(server: RedisServer) -> None:
        handle = await open_redis(server.url, tmp_path)
        store = make_store(handle.client, "flush", tmp_path / "data")
        try:
            first = await asyncio.gather(*(reserve(store, f"a{i}", AMOUNT) for i in range(3)))
            await handle.client.script_flush()
            again = await asyncio.gather(*(reserve(store, f"b{i}", AMOUNT) for i in range(3)))
            await asyncio.gather(*(store.settle(r, input_tokens=1, output_tokens=1,
                                                cost_nanousd=5) for r in first + again))
            usage = await store.usage("t", None)
            assert (usage["spent_today_nanousd"], usage["reserved_usd"]) == (30, 0)
            await handle.client.delete(store._keys.reserve_keys("t", store._keys.windows())[1])
            await handle.client.set(store._keys.reserve_keys("t", store._keys.windows())[1], "x")
            failed = await asyncio.gather(*(reserve(store, f"c{i}", AMOUNT) for i in range(2)),
                                          return_exceptions=True)
            assert all(isinstance(f, ResponseError) and "WRONGTYPE" in str(f) for f in failed)
        finally:
            await store.aclose()
            await handle.close()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


def test_a_key_at_its_soft_limit_is_flagged_for_that_key_only(tmp_path: Path, prefix: str) -> None:
    """reserve.lua judges soft limits itself (the reply carries one flag per
    scope): a key past its own soft budget routes cheaper, its team does not."""
    key_limits = Limits(daily_soft_usd=1.5 * AMOUNT / USD)

    async def body(store: BudgetStore, client: Any) -> None:
        first = await reserve(store, "k1", AMOUNT, key="k", key_limits=key_limits)
        assert not first.soft_limited
        second = await reserve(store, "k2", AMOUNT, key="k", key_limits=key_limits)
        assert second.soft_limited                      # 2 held >= 1.5
        assert store.soft_limited("t", "k") and not store.soft_limited("t")
        other = await reserve(store, "o1", AMOUNT, key="other")
        assert not other.soft_limited

    run(tmp_path, prefix, body)
