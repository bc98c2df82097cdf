"""Issue 20, item 12: a stable id (a batch line) is billed once, whatever day it runs again on.

Settled ids used to be kept per admission day: a batch line billed at 23:59:50
and run again (after a crash, a retry) at 00:00:40 was billed twice. A line
runs again only because its first result was lost, so the bill that stands is
the later run's, the one whose answer is delivered: the team's spend matches
the usage in its output file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budget.store import BudgetStore
from tests.budget.conftest import FakeClock
from tests.budget.test_store import reserve, run


async def _reserve_and_settle(store: BudgetStore, rid: str, cost: int, *, stable: bool,
                              tokens: tuple[int, int] = (3, 4), run: int = 1) -> None:
    held = await store.reserve(request_id=rid, team="t", team_limits=None, key_id=None,
                               key_limits=None, model="small", max_cost_nanousd=cost * 2,
                               max_tokens=10, stable=stable, run_order=run)
    await store.settle(held, input_tokens=tokens[0], output_tokens=tokens[1], cost_nanousd=cost)


def test_a_stable_id_run_again_after_midnight_is_billed_once(tmp_path: Path, prefix: str) -> None:
    clock = FakeClock("2026-11-30T23:59:50")

    async def body(store: BudgetStore, client: Any) -> None:
        await _reserve_and_settle(store, "batch_1-line-a", 500, stable=True)
        clock.set("2026-12-01T00:00:40")
        await _reserve_and_settle(store, "batch_1-line-a", 700, stable=True, tokens=(3, 9),
                                  run=2)
        both = await store.usage("t", None, days=2)
        assert both["spent_today_nanousd"] == 700          # the run whose answer stands
        assert sum(row["cost_nanousd"] for row in both["ledger"]) == 700
        assert sum(row["requests"] for row in both["ledger"]) == 1
        assert sum(row["output_tokens"] for row in both["ledger"]) == 9
        assert both["reserved_usd"] == 0                   # the second hold was released
        clock.set("2026-11-30T12:00:00")
        assert (await store.usage("t", None))["spent_today_nanousd"] == 0   # taken back
        clock.set("2026-12-01T00:01:00")
        await _reserve_and_settle(store, "batch_1-line-a", 700, stable=True, run=3)  # a third
        assert (await store.usage("t", None))["spent_today_nanousd"] == 700

    run(tmp_path, prefix, body, clock=clock)


def test_a_late_journal_replay_does_not_replace_a_later_run(tmp_path: Path, prefix: str) -> None:
    """Run 1's settle was journalled (Redis away), run 2 settled in Redis, then the
    journal is replayed: run 2's bill stands."""
    async def body(store: BudgetStore, client: Any) -> None:
        held = await store.reserve(request_id="batch_3-line-c", team="t", team_limits=None,
                                   key_id=None, key_limits=None, model="small",
                                   max_cost_nanousd=1000, max_tokens=10, stable=True,
                                   run_order=1)
        first_run = held.journal_entry(3, 4, 400, "small")
        await _reserve_and_settle(store, "batch_3-line-c", 600, stable=True, run=2)
        await store.journal.append(first_run)
        assert await store.reconcile_once() == 1
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 600
        assert sum(row["requests"] for row in report["ledger"]) == 1

    run(tmp_path, prefix, body)


def test_a_live_id_keeps_its_per_day_marker(tmp_path: Path, prefix: str) -> None:
    """Random live ids never run again: they stay in the day's set, off T:once."""
    async def body(store: BudgetStore, client: Any) -> None:
        await _reserve_and_settle(store, "req_live", 300, stable=False)
        again = await reserve(store, "req_live", 600)
        await store.settle(again, input_tokens=1, output_tokens=1, cost_nanousd=300)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 300
        assert await client.exists("{" + prefix + ":t}:once") == 0

    run(tmp_path, prefix, body)


def test_a_stable_id_survives_a_journal_replay(tmp_path: Path, prefix: str) -> None:
    """A settle journalled while Redis was away keeps its stable flag on replay."""
    async def body(store: BudgetStore, client: Any) -> None:
        held = await store.reserve(request_id="batch_2-line-b", team="t", team_limits=None,
                                   key_id=None, key_limits=None, model="small",
                                   max_cost_nanousd=1000, max_tokens=10, stable=True,
                                   run_order=1)
        await store.journal.append(held.journal_entry(3, 4, 400, "small"))
        assert await store.reconcile_once() == 1
        await store.settle(held, input_tokens=3, output_tokens=4, cost_nanousd=400)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 400
        assert await client.zscore("{" + prefix + ":t}:once", "batch_2-line-b") is not None

    run(tmp_path, prefix, body)


def test_a_rerun_lines_cache_counts_are_the_later_runs(tmp_path: Path, prefix: str) -> None:
    """The ledger's cached and cache-write tokens follow the bill that stands: a line
    run again replaces the first run's counts, across midnight too, and a journalled
    settle keeps them."""
    clock = FakeClock("2026-11-30T23:59:50")

    async def settle(store: BudgetStore, rid: str, cached: int, written: int, run: int) -> None:
        held = await store.reserve(request_id=rid, team="t", team_limits=None, key_id=None,
                                   key_limits=None, model="small", max_cost_nanousd=2000,
                                   max_tokens=100, stable=True, run_order=run)
        await store.settle(held, input_tokens=90, output_tokens=4, cost_nanousd=900,
                           cached_tokens=cached, cache_write_tokens=written)

    def counts(report: dict[str, Any]) -> tuple[int, int, int]:
        rows = report["ledger"]
        return (sum(r["cached_tokens"] for r in rows), sum(r["cache_write_tokens"] for r in rows),
                sum(r["requests"] for r in rows))

    async def body(store: BudgetStore, client: Any) -> None:
        await settle(store, "batch_5-line-e", 10, 70, 1)
        assert counts(await store.usage("t", None)) == (10, 70, 1)
        clock.set("2026-12-01T00:00:40")
        await settle(store, "batch_5-line-e", 60, 20, 2)
        assert counts(await store.usage("t", None, days=2)) == (60, 20, 1)
        held = await store.reserve(request_id="batch_5-line-f", team="t", team_limits=None,
                                   key_id=None, key_limits=None, model="small",
                                   max_cost_nanousd=2000, max_tokens=100, stable=True,
                                   run_order=1)
        await store.journal.append(held.journal_entry(90, 4, 900, "small", 30, 50))
        assert await store.reconcile_once() == 1
        assert counts(await store.usage("t", None)) == (90, 70, 2)

    run(tmp_path, prefix, body, clock=clock)


def test_a_stalled_run_settling_after_its_takeover_does_not_replace_its_bill(
        tmp_path: Path, prefix: str) -> None:
    """Run A reserves and stalls (a frozen replica); run B takes the line over, settles
    and records it; A resumes and settles after B. B's answer is the one recorded, so
    B's bill stands (A's later settle used to replace it). Then A resumes into a 503
    retry that reserves again: still run 1, it replaces nothing."""
    async def body(store: BudgetStore, client: Any) -> None:
        def reserve_line(run: int) -> Any:
            return store.reserve(request_id="batch_6-line-g", team="t", team_limits=None,
                                 key_id=None, key_limits=None, model="small",
                                 max_cost_nanousd=2000, max_tokens=100, stable=True,
                                 run_order=run)
        a = await reserve_line(1)
        b = await reserve_line(2)
        await store.settle(b, input_tokens=12, output_tokens=15, cost_nanousd=420)
        await store.settle(a, input_tokens=12, output_tokens=25, cost_nanousd=620)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 420
        assert [(r["requests"], r["output_tokens"]) for r in report["ledger"]] == [(1, 15)]
        assert report["reserved_usd"] == 0
        retry = await reserve_line(1)        # A's retry of a 503 reserves after B's run
        await store.settle(retry, input_tokens=12, output_tokens=30, cost_nanousd=720)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 420
        assert [(r["requests"], r["output_tokens"]) for r in report["ledger"]] == [(1, 15)]

    run(tmp_path, prefix, body)
