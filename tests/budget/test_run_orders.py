"""A batch line's runs, numbered by Redis as they start (``batch/scripts.py``), and the
bill that stands: the highest-numbered run's, whichever settles first, and whether
a run settled or had its expired hold billed what it had run up (``bill_progress``).

Two orders used to bill another run than the one whose answer is recorded: a
replica that died mid-answer had its hold's progress billed at expiry, after
which the run that took the line over settled as a duplicate; and a run
whose own hold lapsed while it stalled was billed its progress, not its answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from budget.store import BudgetStore
from tests.budget.test_store import run

LINE = "batch_req_0123456789abcdef"


async def _run(store: BudgetStore, order: int) -> Any:
    return await store.reserve(request_id=LINE, team="t", team_limits=None, key_id=None,
                               key_limits=None, model="small", max_cost_nanousd=5000,
                               max_tokens=100, stable=True, run_order=order)


async def _dies_after(store: BudgetStore, held: Any, progress: tuple[str, int, int, int]) -> None:
    """The run's lease records ``progress``, then its replica stops renewing it."""
    held.progress = lambda: progress
    assert await store.leases.renew() == 1
    store.leases.release(held)
    await asyncio.sleep(1.3)           # past budget.reservation_ttl_s (1 s)


def _bill(report: dict[str, Any]) -> tuple[int, list[tuple[int, int, int]]]:
    return report["spent_today_nanousd"], [
        (row["requests"], row["input_tokens"], row["output_tokens"]) for row in report["ledger"]]


def test_a_takeover_after_a_dead_runs_expired_hold_is_billed_not_a_duplicate(
        tmp_path: Path, prefix: str) -> None:
    async def body(store: BudgetStore, client: Any) -> None:
        first = await _run(store, 1)
        await _dies_after(store, first, ("small", 40, 10, 300))
        second = await _run(store, 2)                # its reserve bills the dead hold first
        assert _bill(await store.usage("t", None)) == (300, [(1, 40, 10)])
        await store.settle(second, input_tokens=40, output_tokens=25, cost_nanousd=700)
        report = await store.usage("t", None)
        assert _bill(report) == (700, [(1, 40, 25)])  # the recorded run's (was 300)
        assert report["reserved_usd"] == 0

    run(tmp_path, prefix, body, reservation_ttl_s=1)


def test_a_runs_settle_replaces_what_its_own_lapsed_hold_was_billed(
        tmp_path: Path, prefix: str) -> None:
    """A stalled replica's hold lapsed and was billed its progress; the replica
    resumes, answers and settles: the answer's bill stands (the run records it)."""
    async def body(store: BudgetStore, client: Any) -> None:
        held = await _run(store, 1)
        await _dies_after(store, held, ("small", 40, 10, 300))
        await store.settle(held, input_tokens=40, output_tokens=25, cost_nanousd=700)
        assert _bill(await store.usage("t", None)) == (700, [(1, 40, 25)])  # was 300
        await store.settle(held, input_tokens=40, output_tokens=25, cost_nanousd=700)
        assert _bill(await store.usage("t", None)) == (700, [(1, 40, 25)])  # replayed: same

    run(tmp_path, prefix, body, reservation_ttl_s=1)


def test_an_earlier_runs_lapsed_hold_never_replaces_a_later_runs_bill(
        tmp_path: Path, prefix: str) -> None:
    """Run 2 settled; run 1's hold (the same id's, renewed by its stalled replica with
    what it had run up) lapses after: run 2's bill stands, and nothing is added."""
    async def body(store: BudgetStore, client: Any) -> None:
        second = await _run(store, 2)
        await store.settle(second, input_tokens=40, output_tokens=25, cost_nanousd=700)
        first = await _run(store, 1)             # the stalled run's retry holds again
        await _dies_after(store, first, ("small", 40, 30, 900))
        later = await store.reserve(request_id="req_other", team="t", team_limits=None,
                                    key_id=None, key_limits=None, model="small",
                                    max_cost_nanousd=10, max_tokens=1)   # purges the lapsed hold
        await store.settle(later, input_tokens=0, output_tokens=0, cost_nanousd=0)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 700
        assert report["reserved_usd"] == 0
        assert sum(row["output_tokens"] for row in report["ledger"]) == 25

    run(tmp_path, prefix, body, reservation_ttl_s=1)


def test_a_generation_outranks_an_older_versions_wall_clock_bill(
        tmp_path: Path, prefix: str) -> None:
    """During an upgrade a line's bill may have been kept by a version that ordered runs
    by the wall clock (ms): a run numbered by Redis replaces it, and a late journal
    line of that version does not come back over the run's bill."""
    async def body(store: BudgetStore, client: Any) -> None:
        legacy = await _run(store, 1_796_000_000_000)   # what an older replica sent as at_ms
        await store.settle(legacy, input_tokens=40, output_tokens=10, cost_nanousd=300)
        numbered = await _run(store, 1)
        await store.settle(numbered, input_tokens=40, output_tokens=25, cost_nanousd=700)
        assert _bill(await store.usage("t", None)) == (700, [(1, 40, 25)])   # was 300
        await store.journal.append(legacy.journal_entry(40, 30, 900, "small"))
        assert await store.reconcile_once() == 1
        assert _bill(await store.usage("t", None)) == (700, [(1, 40, 25)])

    run(tmp_path, prefix, body)


def test_a_free_runs_bill_is_taken_back_from_the_ledger_too(tmp_path: Path, prefix: str) -> None:
    """Run 1 settled at no cost (its day has no spend key, only a ledger); run 2's lapsed
    hold replaces it: the ledger keeps one request, run 2's."""
    async def body(store: BudgetStore, client: Any) -> None:
        first = await _run(store, 1)
        await store.settle(first, input_tokens=40, output_tokens=30, cost_nanousd=0)
        second = await _run(store, 2)
        await _dies_after(store, second, ("small", 40, 10, 300))
        await _run(store, 3)                     # its reserve bills the lapsed hold
        assert _bill(await store.usage("t", None)) == (300, [(1, 40, 10)])   # was (2, 80, 40)

    run(tmp_path, prefix, body, reservation_ttl_s=1)


async def _attempt(store: BudgetStore, held: Any, cost: int, output: int) -> None:
    """An escalation's refused answer of the run ``held``, billed under "<id>.1"
    (``gateway/money/reserve.py`` ``settle_budget``, attempt 1)."""
    await store.settle(dataclasses.replace(held, request_id=held.request_id + ".1", amount=0,
                                           tokens=0),
                       input_tokens=40, output_tokens=output, cost_nanousd=cost, model="small")


def test_a_replaced_runs_escalation_attempts_leave_with_its_bill(
        tmp_path: Path, prefix: str) -> None:
    """Run 1 escalated (an attempt billed 200) and answered (700); run 2 answered at
    once (500) and is recorded: 500, one request. A late copy of run 1's attempt
    changes nothing."""
    async def body(store: BudgetStore, client: Any) -> None:
        first = await _run(store, 1)
        await _attempt(store, first, 200, 30)
        await store.settle(first, input_tokens=40, output_tokens=25, cost_nanousd=700)
        assert (await store.usage("t", None))["spent_today_nanousd"] == 900
        second = await _run(store, 2)
        await store.settle(second, input_tokens=40, output_tokens=20, cost_nanousd=500)
        assert _bill(await store.usage("t", None)) == (500, [(1, 40, 20)])   # was 700
        await _attempt(store, first, 200, 30)
        assert _bill(await store.usage("t", None)) == (500, [(1, 40, 20)])

    run(tmp_path, prefix, body)


def test_a_stalled_runs_attempt_settling_after_the_later_run_is_not_billed(
        tmp_path: Path, prefix: str) -> None:
    async def body(store: BudgetStore, client: Any) -> None:
        first = await _run(store, 1)
        second = await _run(store, 2)
        await store.settle(second, input_tokens=40, output_tokens=20, cost_nanousd=500)
        await _attempt(store, first, 200, 30)                 # run 1 resumes: its attempt,
        await store.settle(first, input_tokens=40, output_tokens=25, cost_nanousd=700)  # answer
        assert _bill(await store.usage("t", None)) == (500, [(1, 40, 20)])   # was 700

    run(tmp_path, prefix, body)


def test_the_recorded_runs_own_attempts_stay_billed(tmp_path: Path, prefix: str) -> None:
    """Both runs escalated: run 2's attempt replaces run 1's, and both of run 2's
    bills stand (two requests, what run 2 cost)."""
    async def body(store: BudgetStore, client: Any) -> None:
        first = await _run(store, 1)
        await _attempt(store, first, 200, 30)
        await store.settle(first, input_tokens=40, output_tokens=25, cost_nanousd=700)
        second = await _run(store, 2)
        await _attempt(store, second, 300, 35)
        await store.settle(second, input_tokens=40, output_tokens=20, cost_nanousd=500)
        report = await store.usage("t", None)
        assert report["spent_today_nanousd"] == 800
        assert [(row["requests"], row["output_tokens"]) for row in report["ledger"]] == [(2, 55)]

    run(tmp_path, prefix, body)


def test_an_attempt_whose_settle_was_journalled_leaves_no_gap(tmp_path: Path, prefix: str) -> None:
    """Run 1's first attempt settled into the journal (Redis away), its second and its
    answer in Redis; run 2 answers and is recorded. Every attempt of run 1 leaves,
    numbered after a gap too, and the replayed one is not billed."""
    async def body(store: BudgetStore, client: Any) -> None:
        first = await _run(store, 1)
        attempt = dataclasses.replace(first, request_id=LINE + ".1", amount=0, tokens=0)
        await store.journal.append(attempt.journal_entry(40, 10, 200, "small"))
        await store.settle(dataclasses.replace(first, request_id=LINE + ".2", amount=0, tokens=0),
                           input_tokens=40, output_tokens=10, cost_nanousd=100, model="small")
        await store.settle(first, input_tokens=40, output_tokens=25, cost_nanousd=700)
        second = await _run(store, 2)
        await store.settle(second, input_tokens=40, output_tokens=20, cost_nanousd=500)
        assert _bill(await store.usage("t", None)) == (500, [(1, 40, 20)])   # was (600, 2)
        assert await store.reconcile_once() == 1
        assert _bill(await store.usage("t", None)) == (500, [(1, 40, 20)])

    run(tmp_path, prefix, body)
