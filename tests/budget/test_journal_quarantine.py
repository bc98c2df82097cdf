"""A journalled spend that can never be replayed is quarantined, not retried forever.

Against the real shared Redis: a key of the wrong type makes the settle script
answer WRONGTYPE for one entry. Before quarantine, every reconcile raised, the
reconciler marked Redis down every second, and a fail_closed replica answered
503 until someone deleted the journal file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis
from prometheus_client import REGISTRY

from budget.journal import JournalEntry
from budget.redis_client import open_redis
from budget.store import BudgetStore
from core.budget_config import Limits
from tests.budget.conftest import SHARED_REDIS, FakeClock, make_store

METRIC = "routegate_budget_journal_quarantined_total"


def _entry(rid: str, day: str, cost: int) -> JournalEntry:
    return JournalEntry(rid, "t", None, "small", day, day[:7], 1, 3, 4, cost)


def _quarantined() -> float:
    return REGISTRY.get_sample_value(METRIC) or 0.0


async def _reserve(store: BudgetStore, rid: str) -> None:
    await store.reserve(request_id=rid, team="t", team_limits=Limits(daily_hard_usd=1),
                        key_id=None, key_limits=None, model="small", max_cost_nanousd=10,
                        max_tokens=10)


def test_a_wrongtype_entry_is_quarantined_and_redis_recovers(tmp_path: Path, prefix: str) -> None:
    clock = FakeClock("2026-11-29T12:00:30")
    store_dir = tmp_path / "data"
    poisoned = "{" + prefix + ":t}:d:2026-11-28"
    sync = redis.Redis.from_url(SHARED_REDIS)
    sync.set(poisoned, "not a hash")  # yesterday's day totals: WRONGTYPE for HINCRBY
    bad, good = _entry("bad", "2026-11-28", 70), _entry("good", "2026-11-29", 40)
    before = _quarantined()

    async def main() -> None:
        handle = await open_redis(SHARED_REDIS, tmp_path)
        store = make_store(handle.client, prefix, store_dir, clock=clock)
        try:
            for entry in (bad, good):
                await store.journal.append(entry)
            reconciler = asyncio.create_task(store.run_reconciler(interval_s=0.05))
            await asyncio.sleep(0.5)
            # Recovered: nothing pending, Redis not marked down, fail_closed serves.
            assert not store.journal.pending()
            assert not store._suspect_down()
            await _reserve(store, "after")
            report = await store.usage("t", None)
            assert report["spent_today_nanousd"] == 40
            await store.aclose()
            await reconciler
        finally:
            await handle.close()

    try:
        asyncio.run(main())
    finally:
        sync.delete(poisoned)
        sync.close()
    quarantine = store_dir / "budget-journal" / "quarantine"
    lines = quarantine.read_bytes().splitlines()
    assert [JournalEntry.from_line(line) for line in lines] == [bad]
    assert _quarantined() == before + 1


def test_a_torn_line_is_quarantined(tmp_path: Path, prefix: str) -> None:
    clock = FakeClock("2026-11-29T12:00:30")
    before = _quarantined()

    async def main() -> Path:
        handle = await open_redis(SHARED_REDIS, tmp_path)
        store = make_store(handle.client, prefix, tmp_path, clock=clock)
        try:
            await store.journal.append(_entry("ok", "2026-11-29", 9))
            with open(store.journal.directory / "r1.jsonl", "ab") as fh:
                fh.write(b'{"request_id": "torn\n')
            assert await store.reconcile_once() >= 1
            assert not store.journal.pending()
            return store.journal.quarantine_path
        finally:
            await handle.close()

    quarantine = asyncio.run(main())
    assert quarantine.read_bytes().splitlines()[0] == b'{"request_id": "torn'
    assert _quarantined() == before + 1
