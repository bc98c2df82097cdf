"""The report's plots, drawn from a small synthetic report: what a reader relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from loadtest.client import Result
from loadtest.plots import draw_all, goodput_figure, latency_figure, routing_mix_figure


def _results(ttfts_s: list[float]) -> list[Result]:
    return [Result(0.0, "interactive", "chat", 100, 10, status=200, model="small", ttft_s=t,
                   e2e_s=t + 0.1, output_tokens=10, completed=True) for t in ttfts_s]


def _run(scenario: str, policy: str, rps: float, mix: dict[str, int], cost: float | None,
         *, batch_rps: float = 0.0, ttfts_s: tuple[float, ...] = ()) -> dict[str, Any]:
    interactive = {"completed": sum(mix.values()), "goodput_rps": rps * 0.9, "models": mix}
    return {"scenario": scenario, "policy": policy, "offered_rps": rps, "batch_rps": batch_rps,
            "cost_per_completed_usd": cost, "_results": _results(list(ttfts_s)),
            "pools": {"interactive": interactive, "batch": {"models": {}}}}


@pytest.fixture
def report() -> dict[str, Any]:
    # Costs two orders of magnitude apart, and one run without any: on a linear
    # axis the cheap router would lie flat on 0.
    runs = [
        _run("load_sweep", "cheapest", 4, {"small": 37, "medium": 3}, 2.1e-5, ttfts_s=(0.05, 0.2)),
        _run("load_sweep", "cheapest", 8, {"small": 70, "medium": 9}, 2.4e-5, ttfts_s=(0.1, 3.0)),
        _run("load_sweep", "quality", 4, {"large": 41}, 4.7e-3, ttfts_s=(0.3, 0.5)),
        _run("load_sweep", "quality", 8, {"large": 23}, None, ttfts_s=(0.4, 4.0)),
        _run("with_batch", "slo_aware", 6, {"small": 55, "medium": 5}, 3e-4, ttfts_s=(0.006, 0.02)),
        _run("with_batch", "slo_aware", 6, {"small": 52, "medium": 6}, 3e-4, batch_rps=16,
             ttfts_s=(0.008, 0.03)),
    ]
    return {"slo": {"ttft_ms": 450.0}, "runs": runs}


@pytest.fixture(autouse=True)
def _close_figures() -> Any:
    yield
    plt.close("all")


def _drawn(fig: Figure) -> Figure:
    fig.canvas.draw()     # limits and legend positions are final only once drawn
    return fig


def test_cost_axis_is_logarithmic_and_panels_share_the_load_range(report: dict[str, Any]) -> None:
    goodput, cost = _drawn(goodput_figure(report)).axes
    assert cost.get_yscale() == "log"
    assert goodput.get_xlim() == cost.get_xlim()
    low, high = cost.get_ylim()
    assert low < 2.1e-5 and high > 4.7e-3       # both routers' costs are on the axis


def test_ttft_panels_share_one_ttft_range(report: dict[str, Any]) -> None:
    left, right = _drawn(latency_figure(report)).axes
    assert left.get_xscale() == right.get_xscale() == "log"
    assert left.get_xlim() == right.get_xlim()
    low, high = left.get_xlim()
    assert low < 6 and high > 4000             # the with_batch 6 ms and the sweep's 4 s both show


def test_routing_mix_legend_is_beside_the_bars_and_counts_are_shown(
        report: dict[str, Any]) -> None:
    fig = _drawn(routing_mix_figure(report))
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend is not None
    legend_box, axes_box = legend.get_window_extent(), ax.get_window_extent()
    assert not legend_box.overlaps(axes_box)
    labels = [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_xticklabels()]
    for run in report["runs"]:
        count = run["pools"]["interactive"]["completed"]
        assert any(str(count) in label for label in labels), count


def test_draw_all_writes_each_png(report: dict[str, Any], tmp_path: Path) -> None:
    paths = draw_all(report, tmp_path)
    assert [p.name for p in paths] == ["goodput_vs_load.png", "ttft_cdf.png", "routing_mix.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
