"""The agent scenario's bounds and summary, on turns written out by hand."""

from __future__ import annotations

import pytest

from loadtest.agent_sessions import QUICK, Turn, bound_costs, summarize, targets

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
