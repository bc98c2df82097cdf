"""The agent scenario's bounds and summary, on turns written out by hand; its spend, from a real ledger."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from budget.redis_client import open_redis
from loadtest.agent_sessions import QUICK, Turn, bound_costs, run_spend, summarize, targets
from tests.budget.conftest import SHARED_REDIS, FakeClock, make_store

# $1 / $0.10 / $2 per million for `m`, ten times that for `l`.
PRICES = {"m": (1e-6, 1e-7, 2e-6), "l": (1e-5, 1e-6, 2e-5)}


def turn(model: str, prompt: int, cached: int, completion: int = 10) -> Turn:
    return Turn(model, "quality-met", 0.1, prompt, cached, True, completion)


def test_a_session_that_stays_on_one_model_is_at_both_bounds() -> None:
    # The upstream read whole blocks (999 of 1,000): the bounds read the whole prompt before.
    session = [turn("m", 1000, 0), turn("m", 1500, 999), turn("m", 2000, 1499)]
    kept, free = bound_costs(PRICES, session)
    bound = (1000 * 1e-6 + 30 * 2e-6) + (500 * 1e-6 + 1000 * 1e-7) + (500 * 1e-6 + 1500 * 1e-7)
    assert kept == pytest.approx(bound)
    assert free == pytest.approx(bound)


def test_a_switch_costs_the_first_visit_and_a_cache_that_evicts_costs_more() -> None:
    # m, then l (cold: its first visit), then m again, whose cache evicted the first turn.
    session = [turn("m", 1000, 0), turn("l", 1500, 0), turn("m", 2000, 0)]
    kept, free = bound_costs(PRICES, session)
    out = 10 * 2e-6 + 10 * 2e-5 + 10 * 2e-6
    # never evicted: the second m reads the 1,000 tokens it served; l pays its whole prompt
    assert kept == pytest.approx(1000e-6 + 1500e-5 + 1000e-6 + 1000e-7 + out)
    # switches free: l reads the 1,000 before, the second m 1,500
    assert free == pytest.approx(1000e-6 + (500e-5 + 1000e-6) + (500e-6 + 1500e-7) + out)
    actual = 1000e-6 + 1500e-5 + 2000e-6 + out
    assert free < kept < actual


def test_the_targets_give_cache_blind_bounds_over_its_own_cost() -> None:
    blind = [[turn("m", 1000, 0), turn("l", 1500, 0), turn("m", 2000, 999)]]
    aware = [[turn("m", 1000, 0), turn("m", 1500, 999), turn("m", 2000, 1499)]]
    rows = [summarize("cache_aware", QUICK, aware, 0.002, PRICES),
            summarize("cache_blind", QUICK, blind, 0.02, PRICES)]
    assert rows[1]["model_sequences"] == ["mlm"]
    assert rows[1]["model_switches_per_session"] == 2
    judged = targets(rows)
    assert judged["agent_sessions_cost_ratio"] == 0.1
    assert judged["agent_sessions_met"] is True
    assert judged["agent_sessions_blind_kept_cache_ratio"] == 1.0       # its cache lost nothing
    assert judged["agent_sessions_blind_free_switch_ratio"] < 0.5


def test_a_failed_turn_is_no_switch_no_model_and_meets_no_target() -> None:
    failed = Turn("l", "503 upstream_error", None, 0, 0, False)
    lost = Turn("-", "transport ConnectError", None, 0, 0, False)
    runs = [[turn("m", 1000, 0), turn("m", 1500, 999), failed],
            [turn("m", 1000, 0), lost], [turn("m", 1000, 0), turn("m", 1500, 999)]]
    for policy in ("cache_aware", "large"):
        row = summarize(policy, QUICK, runs, 0.01, PRICES)
        assert row["model_switches_per_session"] == 0
        assert row["models"] == {"m": 5}
        assert row["quality_target_met"] == round(5 / 7, 4)
        assert row["completed_sessions"] == 1
        assert row["failures"] == {"503 upstream_error": 1, "transport ConnectError": 1}


def test_a_connection_that_fails_is_a_failed_turn_tried_again() -> None:
    """An agent's client retries a refused connection as the openai SDK does; the session
    ends on the last failure instead of the whole scenario raising."""
    import asyncio

    import httpx

    from loadtest.agent_sessions import _turn
    from loadtest.servers import free_port

    async def run() -> tuple[Turn, dict]:
        async with httpx.AsyncClient(timeout=5) as client:
            return await _turn(client, f"http://127.0.0.1:{free_port()}", "k", {"model": "auto"})
    done, message = asyncio.run(run())
    assert not done.ok and done.reason == "transport ConnectError" and message == {}


def test_a_policy_without_a_figure_draws_no_bar() -> None:
    from matplotlib.patches import Rectangle

    from loadtest.plots import sessions_figure

    def row(policy: str, cost: float | None, p95: float | None) -> dict:
        return {"policy": policy, "cost_per_completed_session_usd": cost,
                "prefix_cache_hit_rate": 0.5, "model_switches_per_session": 1.0,
                "quality_target_met": 0.9, "pools": {"interactive": {"ttft_ms": {"p95": p95}}}}
    fig = sessions_figure([row("cache_aware", 0.03, 900.0), row("cache_blind", None, None)])
    titles = [ax.get_title() for ax in fig.axes]
    assert "turns meeting their quality target" in titles
    cost, p95 = fig.axes[0], fig.axes[-1]
    heights = [[bar.get_height() for bar in ax.patches if isinstance(bar, Rectangle)]
               for ax in (cost, p95)]
    assert heights[0][0] == 0.03 and heights[0][1] != heights[0][1]      # NaN: no bar
    assert heights[1][0] == 900.0 and heights[1][1] != heights[1][1]


def test_policies_that_complete_different_sessions_are_also_compared_on_the_same_ones() -> None:
    from loadtest.agent_sessions import paired

    cheap, dear = [turn("m", 1000, 0)], [turn("l", 1000, 0)]
    failed = [turn("m", 1000, 0), Turn("l", "503 queue_timeout", None, 0, 0, False)]
    aware = [dear, failed, cheap]               # the cheap session 1 did not complete here
    blind = [dear, cheap, cheap]
    rows = [summarize("cache_aware", QUICK, aware, 1000 * 1e-5 + 10 * 2e-5 + 2 * (
        1000 * 1e-6 + 10 * 2e-6), PRICES),
            summarize("cache_blind", QUICK, blind, 1000 * 1e-5 + 10 * 2e-5 + 2 * (
                1000 * 1e-6 + 10 * 2e-6), PRICES)]
    paired([aware, blind], [PRICES, PRICES], rows)
    assert [r["sessions_completed_by_all"] for r in rows] == [2, 2]
    assert rows[0]["cost_per_session_completed_by_all_usd"] == \
        rows[1]["cost_per_session_completed_by_all_usd"]
    judged = targets(rows)
    assert judged["agent_sessions_paired_cost_ratio"] == 1.0
    assert judged["agent_sessions_cost_ratio"] > 1.2          # fewer, dearer sessions completed


def test_a_run_across_midnight_is_counted_whole(tmp_path: Path) -> None:
    """The run's spend is the ledger of both days, not the new day's window alone."""
    clock = FakeClock("2026-11-30T23:59:50")
    prefix = f"rgtest-{uuid.uuid4().hex[:12]}"

    async def main() -> dict[str, Any]:
        handle = await open_redis(SHARED_REDIS, tmp_path)
        try:
            store = make_store(handle.client, prefix, tmp_path, clock=clock)
            for rid, cost in (("before", 700_000_000), ("after", 50_000_000)):
                held = await store.reserve(request_id=rid, team="t", team_limits=None,
                                           key_id=None, key_limits=None, model="m",
                                           max_cost_nanousd=cost, max_tokens=10)
                await store.settle(held, input_tokens=1, output_tokens=1, cost_nanousd=cost)
                clock.set("2026-12-01T00:00:10")
            return await store.usage("t", None, days=2)
        finally:
            await handle.client.delete(*[k async for k in handle.client.scan_iter(
                match="{" + prefix + ":*")])
            await handle.close()

    usage = asyncio.run(main())
    assert usage["spent_today_nanousd"] == 50_000_000     # the new day's window only
    assert run_spend(usage) == pytest.approx(0.75, abs=1e-12)
