"""Percentiles, goodput and SLO attainment from per-request results."""

from __future__ import annotations

import pytest

from loadtest.client import Result
from loadtest.stats import Slo, percentile, summarize

SLO = Slo(ttft_s=0.45, tpot_s=0.04)


def done(ttft: float, e2e: float, tokens: int, *, pool: str = "interactive",
         model: str = "small") -> Result:
    return Result(0.0, pool, "chat", 100, tokens, status=200, model=model, ttft_s=ttft,
                  e2e_s=e2e, output_tokens=tokens, completed=True)


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_tpot_excludes_the_first_token() -> None:
    assert done(0.2, 1.2, 11).tpot_s == pytest.approx(0.1)
    assert done(0.2, 0.2, 1).tpot_s == 0.0


def test_goodput_counts_only_completed_requests_inside_the_slo() -> None:
    results = [
        done(0.1, 0.1 + 0.02 * 9, 10),            # good
        done(0.3, 0.3 + 0.03 * 9, 10),            # good
        done(0.6, 0.6 + 0.02 * 9, 10),            # TTFT missed
        done(0.1, 0.1 + 0.05 * 9, 10),            # TPOT missed
        Result(0.0, "interactive", "chat", 100, 10, error="cut"),
        done(2.0, 4.0, 10, pool="batch", model="large"),   # batch: no latency SLO
    ]
    report = summarize(results, window_s=2.0, slos={"interactive": SLO, "batch": None})
    inter = report["pools"]["interactive"]
    assert (inter["sent"], inter["completed"], inter["good"]) == (5, 4, 2)
    assert inter["goodput_rps"] == 1.0
    assert inter["slo_attainment"] == 0.4
    assert inter["errors"] == {"cut": 1}
    assert inter["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert report["pools"]["batch"]["goodput_rps"] == 0.5
    assert report["models"]["large"]["batch"]["completed"] == 1
    assert inter["models"] == {"small": 4}
