"""The experiment's routers, as the fleet config plays them, and its targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.config import parse_config
from loadtest.experiment import FULL, QUICK, targets
from loadtest.fleet import fleet_config


def _refuses_late(config: dict[str, Any]) -> set[bool]:
    return {bool((m.get("scheduler") or {}).get("refuse_late")) for m in config["models"]}


def test_each_router_is_played_by_a_gateway_policy(tmp_path: Path) -> None:
    cheapest = fleet_config("cheapest", tmp_path)     # cheapest meeting quality, load-blind
    assert cheapest["routing"]["auto_policy"] == "quality" and _refuses_late(cheapest) == {False}
    quality = fleet_config("quality", tmp_path)       # the most capable model, always
    assert quality["routing"] == {**quality["routing"], "auto_policy": "fixed",
                                  "fixed_model": "large"}
    slo = fleet_config("slo_aware", tmp_path)
    assert slo["routing"]["auto_policy"] == "slo_aware" and _refuses_late(slo) == {True}
    on_time = fleet_config("cheapest_on_time", tmp_path)
    assert on_time["routing"]["auto_policy"] == "quality" and _refuses_late(on_time) == {True}
    for config in (cheapest, quality, slo, on_time):
        parse_config(config)                          # each is a valid gateway config
    # The scheduler overrides add to the demo's own, never replace them.
    assert slo["models"][2]["scheduler"]["interactive_wait_s"] == 5


def test_the_plans_compare_the_three_routers() -> None:
    assert {"cheapest", "quality", "slo_aware"} <= set(QUICK.policies) <= set(FULL.policies)
    assert FULL.grace_s >= FULL.max_output * 0.045   # 256 tokens on large at full batch


def _row(policy: str, rps: float, goodput: float, cost: float | None) -> dict[str, Any]:
    return {"scenario": "load_sweep", "policy": policy, "offered_rps": rps, "batch_rps": 0.0,
            "pools": {"interactive": {"goodput_rps": goodput}}, "cost_per_completed_usd": cost}


def test_targets_are_judged_at_the_highest_load() -> None:
    runs = [_row("cheapest", 8, 9.0, 1.0), _row("slo_aware", 8, 9.0, 1.0),
            _row("cheapest", 24, 4.0, 1.0), _row("slo_aware", 24, 6.4, 1.1),
            _row("cheapest_on_time", 24, 5.0, 1.0)]
    out = targets(runs, 450)
    assert out["highest_load_rps"] == 24
    assert (out["goodput_ratio"], out["cost_ratio"]) == (1.6, 1.1)
    assert out["goodput_met"] and out["cost_met"]
    assert out["goodput_ratio_vs_cheapest_on_time"] == 1.28
    worse = targets([_row("cheapest", 24, 4.0, 1.0), _row("slo_aware", 24, 5.9, 1.3)], 450)
    assert not worse["goodput_met"] and not worse["cost_met"]
