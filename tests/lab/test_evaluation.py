from pathlib import Path

import numpy as np
import pytest

from lab.commands import evaluation_report
from lab.evaluation import apgr_cpt, route

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "routing"


def test_route_picks_cheapest_qualifying_then_best():
    pred = np.array([[0.9, 0.6, 0.7], [0.2, 0.3, 0.1]])
    prices = np.array([0.9, 0.2, 0.2])
    assert route(pred, prices, 0.55).tolist() == [2, 1]  # tie on price -> higher P
    assert route(pred, prices, 0.95).tolist() == [0, 1]  # nobody qualifies -> best value


def test_apgr_of_perfect_and_reversed_ranking():
    strong = np.array([1.0, 1.0, 0.0, 1.0])
    weak = np.array([0.0, 1.0, 0.0, 1.0])
    best, cpt = apgr_cpt(np.array([0, 1, 2, 3]), strong, weak)
    worst, _ = apgr_cpt(np.array([3, 2, 1, 0]), strong, weak)
    assert best > 0.5 > worst and cpt == 0.25


needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="no shared data")


@pytest.fixture(scope="module")
def report():
    return evaluation_report(DATA)


@needs_data
def test_reference_figures_match_the_issue(report) -> None:
    best = max(report.single.values())
    assert best[0] == pytest.approx(0.563, abs=1e-3) and best[1] == pytest.approx(0.9)
    assert report.oracle[0] == pytest.approx(0.724, abs=1e-3)
    assert report.oracle[1] == pytest.approx(0.17, abs=0.01)


@needs_data
def test_router_quality_per_cost_does_not_regress(report) -> None:
    """What the shipped artifact reaches on the development test set (README)."""
    best_score, best_cost = max(report.single.values())
    assert any(score >= 0.99 * best_score and cost <= 0.3 * best_cost
               for score, cost in report.router.values()), report.router
    assert report.apgr["router"][0] > 0.8
    assert report.apgr["router"][0] > report.apgr["length"][0] + 0.2


@needs_data
def test_shipped_artifact_beats_the_bar(report) -> None:
    """Issue #3: at one target, at least the best single model's score at <= 40% of its
    cost (target 0.80: 0.572 at $0.335 against 0.563 at $0.90; a thin margin, README)."""
    best = max(report.single.values())
    ok = [t for t, (score, cost) in report.router.items()
          if score >= best[0] and cost <= 0.4 * best[1]]
    assert ok, report.router
