"""Redis going away: fail_closed answers 503, fail_open serves a little and journals.

Each test runs its own redis-server (fsync-always AOF) on a free port, and
kills, pauses or restarts it.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from budget.redis_client import RedisHandle, open_redis
from budget.reservation import Reservation
from budget.store import BudgetStore
from core.budget_config import Limits
from core.errors import QuotaExceeded, RateLimited, ServiceUnavailable
from tests.budget.conftest import make_store
from tests.budget.servers import RedisServer

USD = 1_000_000_000


async def reserve(store: BudgetStore, rid: str, amount: int, limits: Limits | None = None):
    return await store.reserve(
        request_id=rid,
        team="t",
        team_limits=limits,
        key_id=None,
        key_limits=None,
        model="small",
        max_cost_nanousd=amount,
        max_tokens=10,
    )


async def spent(store: BudgetStore) -> int:
    return (await store.usage("t", None))["spent_today_nanousd"]


async def _open(server: RedisServer, tmp_path: Path) -> RedisHandle:
    return await open_redis(server.url, tmp_path)


def test_reserve_and_settle_are_one_round_trip_each(tmp_path: Path) -> None:
    async def main(server: RedisServer) -> None:
        handle = await _open(server, tmp_path)
        store = make_store(handle.client, "rg", tmp_path)
        await store.settle(
            await reserve(store, "warm", 1), input_tokens=1, output_tokens=1, cost_nanousd=1
        )  # loads both scripts
        # A private server: every command it processes from here on is ours.
        stats_before = await handle.client.info("commandstats")
        before = (await handle.client.info("commandstats"))["cmdstat_evalsha"]["calls"]
        res = await store.reserve(
            request_id="a",
            team="t",
            team_limits=Limits(daily_hard_usd=1, rpm=5, tpm=100),
            key_id="k",
            key_limits=Limits(daily_hard_usd=1),
            model="m",
            max_cost_nanousd=5,
            max_tokens=10,
        )
        await store.settle(res, input_tokens=1, output_tokens=1, cost_nanousd=1)
        after = (await handle.client.info("commandstats"))["cmdstat_evalsha"]["calls"]
        assert after - before == 2
        stats_after = await handle.client.info("commandstats")
        delta = {k.removeprefix("cmdstat_"): v["calls"] - stats_before.get(k, {"calls": 0})["calls"]
                 for k, v in stats_after.items()}
        # Commands the scripts run inside Redis are counted too; of the ones a
        # client sends, only our INFO calls and the two EVALSHAs appear.
        client_level = {"info", "evalsha", "eval", "script|load", "hello", "ping", "select",
                        "auth", "multi", "exec", "client|setinfo"}
        assert {k: d for k, d in delta.items() if d and k in client_level} == {
            "info": 3, "evalsha": 2}
        await handle.close()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


def test_fail_closed_refuses_fast_and_journals_settles(tmp_path: Path) -> None:
    async def main(server: RedisServer) -> None:
        handle = await _open(server, tmp_path)
        store = make_store(handle.client, "rg", tmp_path)
        res = await reserve(store, "in-flight", 100)
        server.kill()
        start = time.monotonic()
        with pytest.raises(ServiceUnavailable) as caught:
            await reserve(store, "refused", 100)
        assert caught.value.status_code == 503 and "fail_closed" in caught.value.message
        # settle must not raise: the spend goes to the local journal
        await store.settle(res, input_tokens=2, output_tokens=3, cost_nanousd=40)
        assert time.monotonic() - start < 1.5
        assert store.journal.pending()
        assert await store.reconcile_once() == 0  # still down: nothing lost, nothing applied
        server.start()  # the AOF brings back the reservation "in-flight"
        # in-flight's spend, and a release for "refused" (a no-op here: Redis
        # was gone before that reserve, but the gateway cannot know it)
        assert await store.reconcile_once() == 2
        assert not store.journal.pending()
        report = await store.usage("t", None)
        assert (report["spent_today_nanousd"], report["reserved_usd"]) == (40, 0)
        await reserve(store, "after", 100)
        await handle.close()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


def test_black_holed_redis_never_hangs(tmp_path: Path) -> None:
    async def main(server: RedisServer) -> None:
        handle = await _open(server, tmp_path)
        store = make_store(handle.client, "rg", tmp_path)
        res = await reserve(store, "a", 100)
        server.pause()  # connections stay open, replies never come
        try:
            start = time.monotonic()
            with pytest.raises(ServiceUnavailable):
                await reserve(store, "b", 100)
            await store.settle(res, input_tokens=1, output_tokens=1, cost_nanousd=10)
            with pytest.raises(ServiceUnavailable):  # known down: no second wait
                await reserve(store, "c", 100)
            assert time.monotonic() - start < 2.5
        finally:
            server.resume()
        await asyncio.sleep(1.1)  # past the down back-off
        # Redis ran "b"'s reserve once it woke up, but the gateway had already
        # refused "b": the journal holds a's spend and b's release.
        assert await store.reconcile_once() == 2
        assert await spent(store) == 10
        report = await store.usage("t", None)
        assert report["reserved_usd"] == 0
        assert report["ledger"][0]["requests"] == 1     # the release counts no request
        await handle.close()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


async def _serve_while_down(store: BudgetStore) -> list[Reservation]:
    """Fail-open service: 0.5 USD and 8 requests a minute for this replica."""
    served = []
    for i in range(6):  # 0.1 USD each: the 0.5 USD allowance fits five
        try:
            served.append(await reserve(store, f"o{i}", USD // 10))
        except QuotaExceeded as exc:
            assert "emergency allowance" in exc.message
    assert len(served) == 5 and all(r.local for r in served)
    for r in served:
        await store.settle(r, input_tokens=1, output_tokens=1, cost_nanousd=USD // 20)
    served.append(await reserve(store, "o6", USD // 20))  # settling freed headroom
    with pytest.raises(RateLimited):
        for i in range(10):
            await reserve(store, f"rpm{i}", 0)
    assert store.journal.pending()
    return served


def test_fail_open_serves_under_the_replica_cap_and_reconciles(tmp_path: Path) -> None:
    settings: dict[str, Any] = {
        "fail_policy": "fail_open",
        "fail_open_usd_per_replica": 0.5,
        "fail_open_rpm_per_replica": 8,
    }

    async def main(server: RedisServer) -> None:
        handle = await _open(server, tmp_path)
        store = make_store(handle.client, "rg", tmp_path, **settings)
        await store.settle(
            await reserve(store, "before", USD), input_tokens=1, output_tokens=1, cost_nanousd=USD // 10
        )
        server.kill()
        served = await _serve_while_down(store)
        journal_copy = tmp_path / "journal-copy.jsonl"
        shutil.copy(next(store.journal.directory.glob("*.jsonl")), journal_copy)

        server.start()
        task = asyncio.create_task(store.run_reconciler(interval_s=0.05))
        deadline = time.monotonic() + 5
        while store.journal.pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not store.journal.pending()
        expected = USD // 10 + 5 * (USD // 20)
        assert await spent(store) == expected
        # an in-flight local reservation settles straight into Redis now
        await store.settle(served[-1], input_tokens=1, output_tokens=1, cost_nanousd=7)
        expected += 7
        # replaying the same journal again (a crash between apply and delete) bills nothing
        shutil.copy(journal_copy, store.journal.directory / "r1.jsonl")
        await asyncio.sleep(0.3)
        assert not store.journal.pending()
        assert await spent(store) == expected
        report = await store.usage("t", None)
        assert report["ledger"][0]["requests"] == 7
        await store.aclose()
        await asyncio.wait_for(task, 2)
        await handle.close()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


def test_fail_open_respects_the_last_known_remaining_budget(tmp_path: Path) -> None:
    async def main(server: RedisServer) -> None:
        handle = await _open(server, tmp_path)
        store = make_store(
            handle.client, "rg", tmp_path, fail_policy="fail_open", fail_open_usd_per_replica=100
        )
        limits = Limits(daily_hard_usd=1)
        await store.settle(
            await reserve(store, "a", USD, limits),
            input_tokens=1,
            output_tokens=1,
            cost_nanousd=USD * 9 // 10,
        )
        server.kill()
        await reserve(store, "b", USD // 20, limits)  # 0.05 of the 0.1 left
        with pytest.raises(QuotaExceeded):
            await reserve(store, "c", USD // 10, limits)
        await handle.close()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))
