"""Policies are pure: validated config and request features in, a Decision out."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from core.config import GatewayConfig, ModelFacts, parse_config
from core.escalation_config import EscalationConfig
from core.types import LiveStats
from gateway.pipeline.ladder import Ladder, climb, climb_on
from policies import Candidate, RouteContext, get_policy


def config(**routing: object) -> GatewayConfig:
    def model(name: str, price: float, ability: float) -> dict:
        return {"name": name, "price": {"input_per_mtok": price, "output_per_mtok": price},
                "ability": ability, "simulate": {"tpot_ms": 10}}
    return parse_config({"models": [model("small", 0.1, 0.4), model("mid", 1.0, 0.7),
                                    model("big", 5.0, 0.9)], "routing": routing})


def p_correct(ability: float, logit: float) -> float:
    """The classifier's documented formula, so the test reads without the artifact."""
    return 1 / (1 + math.exp(-(math.log(ability / (1 - ability)) - logit)))


def candidates(cfg: GatewayConfig, logit: float = 0.0, **ttft: float) -> list[Candidate]:
    out = []
    for m in cfg.models:
        t = ttft.get(m.name, 0.1)
        cost = m.price.input_per_mtok * 1e-4
        out.append(Candidate(ModelFacts.of(m), LiveStats(), p_correct(m.ability, logit), cost, t,
                             0.01, t + 1.0))
    return out


def ctx(target: float, **kw: bool) -> RouteContext:
    return RouteContext(prompt_tokens=100, expected_output_tokens=100, pool="interactive",
                        quality_target=target, confidence=0.8, **kw)


def test_cheapest_ignores_quality() -> None:
    cfg = config()
    decision = get_policy("cheapest", cfg).choose(ctx(0.99), candidates(cfg, 3.0))
    assert decision.model == "small"


def test_fixed_always_picks_its_model() -> None:
    cfg = config(fixed_model="mid")
    assert get_policy("fixed", cfg).choose(ctx(0.5), candidates(cfg)).model == "mid"


@pytest.mark.parametrize("logit, target, expected", [
    (-3.0, 0.8, "small"),   # easy prompt: the weak model will do
    (0.0, 0.6, "mid"),      # average prompt: small (0.4) fails the target, mid (0.7) meets it
    (1.5, 0.6, "big"),      # hard: only big gets there
    (0.0, 0.95, "big"),     # unreachable target: the strongest
])
def test_cost_quality_picks_cheapest_meeting_target(logit: float, target: float,
                                                    expected: str) -> None:
    cfg = config()
    policy = get_policy("cost_quality", cfg)
    decision = policy.choose(ctx(target), candidates(cfg, logit))
    assert decision.model == expected
    assert decision.predicted_quality is not None
    assert decision.confidence == 0.8


def test_the_ladder_climbs_to_models_at_least_as_good_cheapest_first() -> None:
    cfg = config()
    cands = candidates(cfg)
    decision = get_policy("cost_quality", cfg).choose(ctx(0.6), cands)
    assert decision.model == "mid"
    climbed = climb(decision, cands, EscalationConfig(), max_attempts=3)
    assert climbed.fallbacks == ("big",)      # small is less likely correct: never a rung
    small = climb(replace(decision, model="small"), cands, EscalationConfig(), max_attempts=3)
    assert small.fallbacks == ("mid", "big")
    capped = climb(replace(decision, model="small"), cands, EscalationConfig(max_steps=1),
                   max_attempts=3)
    assert capped.fallbacks == ("mid",)


def test_an_explicit_ladder_sets_the_order() -> None:
    cfg = config()
    cands = candidates(cfg)
    decision = replace(get_policy("cheapest", cfg).choose(ctx(0.5), cands), model="small")
    climbed = climb(decision, cands, EscalationConfig(ladder=["small", "big", "mid"]),
                    max_attempts=3)
    assert climbed.fallbacks == ("big", "mid")


def test_a_pair_heads_ladder_says_which_model_is_above() -> None:
    """A pair head can predict the weaker model more likely correct on a prompt. A
    refused answer (or low confidence) must still climb to the stronger model, and a
    choice of the stronger one must not climb down to the weaker."""
    cfg = config()
    cands = [replace(c, p_correct={"small": 0.8, "mid": 0.6, "big": 0.9}[c.name])
             for c in candidates(cfg)]
    decision = replace(get_policy("cheapest", cfg).choose(ctx(0.5), cands), confidence=0.2)
    ladder = Ladder.of(EscalationConfig(), max_attempts=3)
    assert climb_on(ladder, decision, cands).fallbacks == ("big",)    # mid left out
    assert climb_on(ladder, decision, cands, ("small", "mid")).fallbacks == ("mid", "big")
    unsure = Ladder.of(EscalationConfig(min_confidence=0.3), max_attempts=3)
    climbed = climb_on(unsure, decision, cands, ("small", "mid"))
    assert (climbed.model, climbed.reason) == ("mid", "low_confidence")
    mid = replace(decision, model="mid")
    assert climb_on(ladder, mid, cands).fallbacks == ("small", "big")  # down to small
    assert climb_on(ladder, mid, cands, ("small", "mid")).fallbacks == ("big",)


def test_low_confidence_starts_one_rung_up() -> None:
    cfg = config()
    cands = candidates(cfg)
    decision = replace(get_policy("cheapest", cfg).choose(ctx(0.5), cands), confidence=0.2)
    climbed = climb(decision, cands, EscalationConfig(min_confidence=0.3), max_attempts=3)
    assert (climbed.model, climbed.reason, climbed.fallbacks) == ("mid", "low_confidence",
                                                                  ("big",))
    sure = climb(replace(decision, confidence=0.9), cands, EscalationConfig(min_confidence=0.3),
                 max_attempts=3)
    assert sure.model == "small"


def test_cost_quality_prefers_models_within_the_latency_slo() -> None:
    cfg = config()
    slow_mid = candidates(cfg, mid=2.0)          # mid's TTFT is far over the 450 ms SLO
    decision = get_policy("cost_quality", cfg).choose(ctx(0.6), slow_mid)
    assert decision.model == "big"
    assert decision.reason == "quality-met"


def test_soft_limit_lowers_the_target() -> None:
    cfg = config()
    policy = get_policy("cost_quality", cfg)
    normal = policy.choose(ctx(0.55), candidates(cfg, -0.2))
    squeezed = policy.choose(ctx(0.55, soft_limited=True), candidates(cfg, -0.2))
    assert (normal.model, squeezed.model) == ("mid", "small")
    assert squeezed.reason.endswith("soft-limit")


def test_unknown_policy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy("nope", config())


def test_hopeless_prompts_do_not_buy_the_priciest_model() -> None:
    # logit 5: P(correct) is 0.005 / 0.016 / 0.057; paying 50x for 0.05 of P is poor value.
    cfg = config()
    decision = get_policy("cost_quality", cfg).choose(ctx(0.8), candidates(cfg, 5.0))
    assert decision.reason == "quality-unreachable-best-value"
    assert decision.model == "small"


def test_selection_rule_is_shared_and_pure() -> None:
    from policies.selection import select
    assert select([0.4, 0.7, 0.9], [1, 5, 20], 0.6) == (1, True)
    assert select([0.4, 0.7, 0.9], [1, 5, 20], 0.95, kappa=0.0) == (2, False)
    assert select([0.4, 0.7, 0.9], [1, 5, 20], 0.95, kappa=10.0) == (0, False)
