"""BudgetStore against the real shared Redis: expiry, idempotency, rollover, rates, overrides."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from budget.redis_client import open_redis
from budget.store import BudgetStore
from core.budget_config import Limits
from core.errors import QuotaExceeded, RateLimited
from tests.budget.conftest import SHARED_REDIS, FakeClock, make_store

USD = 1_000_000_000


def run(tmp_path: Path, prefix: str, body: Callable[..., Awaitable[None]], **kw: Any) -> None:
    """Run ``body(store, client)`` with a store on its own connection pool."""

    async def main() -> None:
        handle = await open_redis(SHARED_REDIS, tmp_path)
        try:
            await body(make_store(handle.client, prefix, tmp_path, **kw), handle.client)
        finally:
            await handle.close()

    asyncio.run(main())


async def reserve(
    store: BudgetStore,
    rid: str,
    amount: int,
    *,
    team: str = "t",
    limits: Limits | None = None,
    key: str | None = None,
    key_limits: Limits | None = None,
    tokens: int = 10,
    counted: bool = True,
):
    return await store.reserve(
        request_id=rid,
        team=team,
        team_limits=limits,
        key_id=key,
        key_limits=key_limits,
        model="small",
        max_cost_nanousd=amount,
        max_tokens=tokens,
        counted=counted,
    )


def test_expired_reservation_of_a_crashed_replica_is_released(tmp_path: Path, prefix: str) -> None:
    limits = Limits(daily_hard_usd=1)

    async def body(store: BudgetStore, client: Any) -> None:
        crashed = await reserve(store, "crashed", USD, limits=limits)  # never settled
        with pytest.raises(QuotaExceeded):
            await reserve(store, "blocked", 1, limits=limits)
        await asyncio.sleep(1.2)
        fresh = await reserve(store, "fresh", USD // 2, limits=limits)
        report = await store.usage("t", limits)
        assert report["reserved_usd"] == 0.5  # only "fresh" is outstanding
        # the crashed request's late settle still bills once, releasing nothing twice
        await store.settle(crashed, input_tokens=1, output_tokens=1, cost_nanousd=7)
        await store.settle(fresh, input_tokens=1, output_tokens=1, cost_nanousd=5)
        report = await store.usage("t", limits)
        assert (report["spent_today_nanousd"], report["reserved_usd"]) == (12, 0)

    run(tmp_path, prefix, body, reservation_ttl_s=1)


def test_settle_is_idempotent_and_reserve_retries_count_once(tmp_path: Path, prefix: str) -> None:
    async def body(store: BudgetStore, client: Any) -> None:
        res = await reserve(store, "a", 1000)
        again = await reserve(store, "a", 1000)  # a retry after a lost reply
        assert (await store.usage("t", None))["reserved_usd"] == 1000 / USD
        for _ in range(3):
            await store.settle(again, input_tokens=3, output_tokens=4, cost_nanousd=600)
        await store.settle(res, input_tokens=3, output_tokens=4, cost_nanousd=600)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 600
        assert report["reserved_usd"] == 0
        assert report["ledger"][0]["requests"] == 1
        # a reserve retried after its settle: the stray hold is released, nothing billed
        stray = await reserve(store, "a", 1000)
        await store.settle(stray, input_tokens=3, output_tokens=4, cost_nanousd=600)
        report = await store.usage("t", None)
        assert (report["spent_today_nanousd"], report["reserved_usd"]) == (600, 0)
        # a settle with no reservation at all (journal replay) bills exactly once too
        ghost = dataclasses.replace(res, request_id="ghost")
        await store.settle(ghost, input_tokens=1, output_tokens=1, cost_nanousd=50)
        await store.settle(ghost, input_tokens=1, output_tokens=1, cost_nanousd=50)
        assert (await store.usage("t", None))["spent_today_nanousd"] == 650

    run(tmp_path, prefix, body)


def test_rollover_bills_the_admitting_window_and_loses_nothing(tmp_path: Path, prefix: str) -> None:
    clock = FakeClock("2026-11-30T23:59:59", tz="Europe/Paris")
    limits = Limits(daily_hard_usd=1, monthly_hard_usd=100)

    async def body(store: BudgetStore, client: Any) -> None:
        await store.settle(
            await reserve(store, "x", USD // 2, limits=limits),
            input_tokens=1,
            output_tokens=1,
            cost_nanousd=USD // 2,
        )
        late = await reserve(store, "late", USD // 2, limits=limits)  # day now full
        clock.set("2026-12-01T00:00:05", tz="Europe/Paris")
        await store.settle(late, input_tokens=1, output_tokens=1, cost_nanousd=USD // 4)
        report = await store.usage("t", limits, days=2)
        assert (report["day"], report["month"]) == ("2026-12-01", "2026-12")
        assert report["spent_today_nanousd"] == 0 and report["spent_month_nanousd"] == 0
        assert {r["day"]: r["cost_nanousd"] for r in report["ledger"]} == {"2026-11-30": USD // 2 + USD // 4}
        # the new day has its own window: a full-day reservation fits again
        await reserve(store, "new-day", USD, limits=limits)
        clock.set("2026-11-30T12:00:00", tz="Europe/Paris")  # look back at the old day
        old = await store.usage("t", limits, days=1)
        assert old["spent_today_nanousd"] == USD // 2 + USD // 4
        assert old["spent_month_nanousd"] == USD // 2 + USD // 4

    run(tmp_path, prefix, body, clock=clock, timezone="Europe/Paris")


def test_rpm_and_tpm_limits_with_retry_after(tmp_path: Path, prefix: str) -> None:
    clock = FakeClock("2026-11-29T10:00:15")

    async def body(store: BudgetStore, client: Any) -> None:
        rpm = Limits(rpm=3)
        for i in range(3):
            await reserve(store, f"r{i}", 1, limits=rpm)
        with pytest.raises(RateLimited) as caught:
            await reserve(store, "r3", 1, limits=rpm)
        err = caught.value
        assert not isinstance(err, QuotaExceeded)
        assert (err.status_code, err.code, err.error_type) == (
            429,
            "rate_limit_exceeded",
            "rate_limit_error",
        )
        # a sliding window: 45 s to this minute's end, then 20 s for its three
        # requests to fade to two
        assert err.headers["retry-after"] == "65"
        assert "3 requests per minute" in err.message
        clock.now += 60  # next minute: the previous three still weigh 3 x 0.75
        with pytest.raises(RateLimited):
            await reserve(store, "r4", 1, limits=rpm)
        clock.now += 5   # 20 s in: 3 x 2/3 + 1 fits
        await reserve(store, "r4", 1, limits=rpm)

        tpm = Limits(tpm=150)
        first = await reserve(store, "t0", 1, team="tok", limits=tpm, tokens=100)
        with pytest.raises(RateLimited, match="150 tokens per minute"):
            await reserve(store, "t1", 1, team="tok", limits=tpm, tokens=100)
        # settle corrects the reserved 100 tokens down to the real 20
        await store.settle(first, input_tokens=5, output_tokens=15, cost_nanousd=1)
        await reserve(store, "t2", 1, team="tok", limits=tpm, tokens=100)

    run(tmp_path, prefix, body, clock=clock)


def test_the_gateways_own_work_is_held_against_budgets_but_not_rate_limits(
        tmp_path: Path, prefix: str) -> None:
    """A shadow answer's reservation (counted=False) neither counts toward nor is
    refused by rpm and tpm, team or key, and its settle leaves tpm alone; the
    money limits hold it as any other."""
    clock = FakeClock("2026-11-29T10:00:15")

    async def body(store: BudgetStore, client: Any) -> None:
        team = Limits(rpm=2, tpm=100, daily_hard_usd=1)
        key = Limits(rpm=2, tpm=100)
        own = [await reserve(store, f"own{i}", USD // 10, limits=team, key="k",
                             key_limits=key, tokens=90, counted=False) for i in range(5)]
        for res in own:
            await store.settle(res, input_tokens=60, output_tokens=30, cost_nanousd=USD // 20)
        # The clients' two requests and 100 tokens are all still there.
        first = await reserve(store, "c0", 1, limits=team, key="k", key_limits=key, tokens=50)
        await reserve(store, "c1", 1, limits=team, key="k", key_limits=key, tokens=50)
        with pytest.raises(RateLimited):
            await reserve(store, "c2", 1, limits=team, key="k", key_limits=key, tokens=1)
        await store.settle(first, input_tokens=1, output_tokens=1, cost_nanousd=1)
        # Money: 5 x 0.05 spent, so a hold of 0.8 more is refused, own or not.
        with pytest.raises(QuotaExceeded):
            await reserve(store, "own9", 8 * USD // 10, limits=team, tokens=1, counted=False)
        report = await store.usage("t", team)
        assert report["spent_today_nanousd"] == 5 * USD // 20 + 1

    run(tmp_path, prefix, body, clock=clock)


def test_key_limits_narrow_the_team_and_soft_limit_is_cached(tmp_path: Path, prefix: str) -> None:
    team = Limits(daily_hard_usd=10, daily_soft_usd=2)
    key = Limits(daily_hard_usd=1, rpm=100)

    async def body(store: BudgetStore, client: Any) -> None:
        assert not store.soft_limited("t")
        res = await reserve(store, "a", USD, limits=team, key="ci", key_limits=key)
        assert not res.soft_limited
        with pytest.raises(QuotaExceeded) as caught:
            await reserve(store, "b", 1, limits=team, key="ci", key_limits=key)
        assert "API key 'ci' of team 't'" in caught.value.message
        assert "$1.000000 spent or reserved of $1.000000" in caught.value.message
        other = await reserve(store, "c", 2 * USD, limits=team, key="web")
        assert other.soft_limited and store.soft_limited("t")  # 3 USD committed >= 2
        await store.settle(res, input_tokens=1, output_tokens=1, cost_nanousd=USD // 10)
        await store.settle(other, input_tokens=1, output_tokens=1, cost_nanousd=USD // 10)
        assert not store.soft_limited("t")  # settle replies refresh the cache
        report = await store.usage("t", team)
        assert report["keys"]["ci"]["spent_today_usd"] == 0.1
        assert report["remaining_today_usd"] == 9.8
        assert report["soft_limited"] is False

    run(tmp_path, prefix, body)


def test_admin_override_applies_on_another_replica_at_once(tmp_path: Path, prefix: str) -> None:
    config = Limits(daily_hard_usd=10, rpm=1000)

    async def body(admin: BudgetStore, client: Any) -> None:
        other = await open_redis(SHARED_REDIS, tmp_path)
        try:
            replica = make_store(other.client, prefix, tmp_path, replica="r2")
            await reserve(replica, "a", USD, limits=config)
            await admin.set_override("t", Limits(daily_hard_usd=1.5))
            assert await admin.get_override("t") == Limits(daily_hard_usd=1.5)
            with pytest.raises(QuotaExceeded, match="of \\$1.500000"):
                await reserve(replica, "b", USD, limits=config)
            report = await replica.usage("t", config)
            assert report["limits"]["daily_hard_usd"] == 1.5 and report["limits"]["rpm"] == 1000
            await admin.set_override("t", Limits(rpm=1000), key_id="ci")
            await admin.clear_override("t")
            assert await admin.get_override("t") is None
            await reserve(replica, "c", USD, limits=config)
            await admin.set_override("t", Limits(rpm=1), key_id="ci")
            await reserve(replica, "d", 1, limits=config, key="ci")
            with pytest.raises(RateLimited, match="API key 'ci'"):
                await reserve(replica, "e", 1, limits=config, key="ci")
        finally:
            await other.close()

    run(tmp_path, prefix, body)


def test_concurrent_settles_share_script_calls_and_bill_each_once(tmp_path: Path, prefix: str) -> None:
    async def body(store: BudgetStore, client: Any) -> None:
        scripts = store._scripts
        calls: list[int] = []
        settle_script = scripts._settle

        async def counting(keys: list[Any], args: list[Any]) -> Any:
            calls.append((len(args) - 5) // 10)         # requests in this call (settle.lua)
            return await settle_script(keys=keys, args=args)

        scripts._settle = counting
        held = [await reserve(store, f"r{i}", 1000, key="k1" if i % 2 else None)
                for i in range(40)]
        # all settled at once, the first one twice: a duplicate inside one batch
        await asyncio.gather(*(store.settle(r, input_tokens=1, output_tokens=2, cost_nanousd=100 + i)
                               for i, r in enumerate([held[0], *held])))
        assert sum(calls) == 41 and len(calls) < 41, calls
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == sum(100 + i for i in range(41)) - 101  # the duplicate
        assert report["reserved_usd"] == 0
        assert report["ledger"][0]["requests"] == 40
        replies = [await scripts.queue_settle(
            request_id=f"r{i}", team="t", windows=held[0].windows, key_id=None, model="small",
            input_tokens=1, output_tokens=1, cost=1) for i in range(2)]
        assert [r.state for r in replies] == ["duplicate", "duplicate"]

    run(tmp_path, prefix, body)


def test_budget_keys_always_carry_an_expiry(tmp_path: Path, prefix: str) -> None:
    """A team that goes quiet leaves nothing behind: every key reserve and settle
    write expires, the reservation keys a minute after their last hold."""
    async def body(store: BudgetStore, client: Any) -> None:
        held = [await reserve(store, f"e{i}", 1000, key="k1", limits=Limits(rpm=1000))
                for i in range(3)]
        keys = [k.decode() if isinstance(k, bytes) else k
                async for k in client.scan_iter(match="{" + prefix + ":*")]
        assert any(":rl:" in k for k in keys) and any(k.endswith(":res") for k in keys)
        for k in keys:
            ttl_ms = await client.pttl(k)
            assert 0 < ttl_ms <= (600 + 60) * 1000 or ":rl:" in k and 0 < ttl_ms <= 120_000, (k, ttl_ms)
        for r in held:
            await store.settle(r, input_tokens=1, output_tokens=1, cost_nanousd=1)
        keys = [k async for k in client.scan_iter(match="{" + prefix + ":*")]
        assert keys and all([await client.pttl(k) > 0 for k in keys])

    run(tmp_path, prefix, body)


def test_rate_limits_slide_across_the_minute_boundary(tmp_path: Path, prefix: str) -> None:
    """A burst at the end of one minute and another at the start of the next
    cannot pass twice the limit (fixed minute buckets would let both through)."""
    clock = FakeClock("2026-11-29T10:00:55")

    async def body(store: BudgetStore, client: Any) -> None:
        rpm = Limits(rpm=4)
        for i in range(4):
            await reserve(store, f"a{i}", 1, limits=rpm)
        clock.now += 7   # 10:01:02, a new minute bucket
        with pytest.raises(RateLimited) as caught:
            await reserve(store, "b0", 1, limits=rpm)
        assert caught.value.headers["retry-after"] == "13"   # 4 x 45/60 + 1 fits at 10:01:15
        clock.now += 13
        await reserve(store, "b0", 1, limits=rpm)
        with pytest.raises(RateLimited):
            await reserve(store, "b1", 1, limits=rpm)

    run(tmp_path, prefix, body, clock=clock)


def test_spend_is_read_only_for_scopes_with_a_budget(tmp_path: Path, prefix: str) -> None:
    """The reserve script skips the spend figures of a scope with no daily or
    monthly budget (nothing judges them); a scope with one gets them exactly."""
    async def body(store: BudgetStore, client: Any) -> None:
        scripts = store._scripts
        windows = store._keys.windows()

        async def reply(rid: str, team_limits: Limits | None) -> Any:
            return await scripts.reserve(
                request_id=rid, team="t", windows=windows, amount=100, tokens=1, key_id="k",
                team_limits=team_limits, key_limits=None, previous_weight=0.0)

        held = await reserve(store, "spent", 500, key="k")
        await store.settle(held, input_tokens=1, output_tokens=1, cost_nanousd=500)
        bare = await reply("r1", None)
        assert bare.ok and tuple(bare.team) == (0, 0, 0) and bare.soft == 0
        judged = await reply("r2", Limits(daily_soft_usd=1))
        assert judged.ok and judged.team.spent_day == 500 and judged.team.reserved == 200
        assert judged.soft == 0
        # 500 spent + 300 held with this one's 100: at a soft limit of 800 nano-USD.
        reached = await reply("r3", Limits(daily_soft_usd=800 / 1e9))
        assert reached.ok and reached.soft == 1 and reached.team.reserved == 300

    run(tmp_path, prefix, body)


def test_a_batch_of_huge_costs_settles_to_the_exact_nano_usd(tmp_path: Path, prefix: str) -> None:
    """settle.lua sums a batch's amounts per field before writing them: sums past
    2^53 nano-USD (where a Lua number stops being an exact integer) stay exact."""
    costs = [2**52 + 1, 2**51 + 3, 2**51 + 5, 2**51 + 7, 7]   # one alone, three whose sum
    total = sum(costs)                                        # passes 2^52, a small one

    async def body(store: BudgetStore, client: Any) -> None:
        held = [await reserve(store, f"h{i}", cost + 10, key="k") for i, cost in enumerate(costs)]
        await asyncio.gather(*(store.settle(r, input_tokens=1, output_tokens=1, cost_nanousd=c)
                               for r, c in zip(held, costs, strict=True)))
        report = await store.usage("t", None)
        assert total > 2**53
        assert report["spent_today_nanousd"] == total
        assert report["reserved_usd"] == 0
        assert report["ledger"][0]["cost_nanousd"] == total

    run(tmp_path, prefix, body)


def test_a_release_only_settle_bills_nothing_and_the_id_stays_billable(tmp_path: Path,
                                                                       prefix: str) -> None:
    """RELEASE_ONLY frees the hold without a ledger line and without marking the
    id settled, so work run again under the same id (a batch line) is billed then."""
    from budget.journal import RELEASE_ONLY

    async def body(store: BudgetStore, client: Any) -> None:
        held = await reserve(store, "line-1", 500)
        await store.settle(held, input_tokens=0, output_tokens=0, cost_nanousd=0,
                           model=RELEASE_ONLY)
        report = await store.usage("t", None)
        assert report["ledger"] == [] and report["reserved_usd"] == 0
        again = await reserve(store, "line-1", 500)
        await store.settle(again, input_tokens=3, output_tokens=4, cost_nanousd=123)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 123
        assert [row["requests"] for row in report["ledger"]] == [1]

    run(tmp_path, prefix, body)
