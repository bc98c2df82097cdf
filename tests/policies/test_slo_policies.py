"""``quality`` and ``slo_aware``: the same quality rule, with and without the
latency SLO; and the live predictions they are fed."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from core.config import GatewayConfig, ModelFacts, parse_config
from core.types import LEARNED_STALE_S, LiveStats
from policies import POLICIES, Candidate, RouteContext, get_policy
from policies.slo import AT_RISK, queued_ttft_s


def config() -> GatewayConfig:
    def model(name: str, price: float, ability: float) -> dict:
        return {"name": name, "price": {"input_per_mtok": price, "output_per_mtok": price},
                "ability": ability}
    return parse_config({"models": [model("small", 0.1, 0.5), model("mid", 1.0, 0.8),
                                    model("big", 5.0, 0.9)]})


def cands(cfg: GatewayConfig, **ttft: float) -> list[Candidate]:
    return [Candidate(ModelFacts.of(m), LiveStats(), m.ability, m.price.input_per_mtok * 1e-4,
                      ttft.get(m.name, 0.1), 0.02, ttft.get(m.name, 0.1) + 2.0)
            for m in cfg.models]


def ctx(target: float = 0.75, pool: str = "interactive") -> RouteContext:
    return RouteContext(prompt_tokens=100, expected_output_tokens=100, pool=pool,
                        quality_target=target)


def test_the_experiment_s_policies_are_registered_by_name() -> None:
    assert {"cheapest", "quality", "slo_aware", "cost_quality"} <= set(POLICIES)
    assert POLICIES["cost_quality"] is POLICIES["slo_aware"]


def test_quality_ignores_latency() -> None:
    cfg = config()
    decision = get_policy("quality", cfg).choose(ctx(), cands(cfg, mid=5.0))
    assert decision.model == "mid" and decision.slo is None


def test_slo_aware_gives_way_to_the_next_cheapest_meeting_both() -> None:
    cfg = config()
    decision = get_policy("slo_aware", cfg).choose(ctx(), cands(cfg, mid=5.0))
    assert (decision.model, decision.reason, decision.slo) == ("big", "quality-met", None)


def test_when_none_meets_both_the_best_prediction_serves_at_risk() -> None:
    cfg = config()
    decision = get_policy("slo_aware", cfg).choose(ctx(), cands(cfg, mid=3.0, big=0.9))
    assert (decision.model, decision.slo) == ("big", AT_RISK)   # misses by less than mid


def test_an_unreachable_target_still_prefers_a_model_within_the_slo() -> None:
    cfg = config()
    decision = get_policy("slo_aware", cfg).choose(ctx(0.99), cands(cfg, big=5.0))
    assert decision.slo is None and decision.model != "big"


def test_a_standing_queue_counts_its_waiters_when_slo_aware_routing_weighs_a_model() -> None:
    cfg = config()
    cs = cands(cfg)
    # mid: both slots busy and four waiting for ~1 s slots. Its LIFO prediction
    # (0.1 s: a newcomer goes first) hides the waiters a newcomer would make late.
    standing = LiveStats(capacity=2, admitted=2, queued=4, lifo=True, slot_s=1.0)
    cs[1] = replace(cs[1], stats=standing)
    assert queued_ttft_s(cs[1]) == pytest.approx(0.1 + (5 - 1) * 1.0 / 2)
    decision = get_policy("slo_aware", cfg).choose(ctx(), cs)
    assert (decision.model, decision.slo) == ("big", None)      # spilled to where there is room
    cs[1] = replace(cs[1], stats=LiveStats(capacity=2, admitted=2, queued=4, slot_s=1.0))
    assert queued_ttft_s(cs[1]) == cs[1].ttft_s                # FIFO: already in the prediction


def test_batch_work_has_no_ttft_slo() -> None:
    cfg = config()
    decision = get_policy("slo_aware", cfg).choose(ctx(pool="batch"), cands(cfg, mid=5.0))
    assert (decision.model, decision.slo) == ("mid", None)


def test_the_prefill_rate_is_learned_and_predicts_ttft() -> None:
    stats = LiveStats(capacity=4)
    for _ in range(30):
        stats.observe_prefill(2000, 0.5)                     # 4,000 tokens/s
    assert stats.prefill_tokens_per_s == pytest.approx(4000)
    assert stats.predicted_ttft_s(400, default_prefill=1e9) == pytest.approx(0.1, rel=0.05)
    assert stats.add_backlog(4000, 4000, now=100.0) == 0    # a second of prefill admitted
    assert stats.backlog(4000, 100.5) == pytest.approx(2000)  # half drained half a second on
    assert stats.add_backlog(1000, 4000, now=100.5) == pytest.approx(2000)


def test_one_miscounted_answer_moves_the_prefill_rate_little() -> None:
    stats = LiveStats(capacity=4)
    stats.observe_prefill(2000, 0.5)                         # 4,000 tokens/s
    stats.observe_prefill(20, 0.5)                           # a queue the count missed: 40/s
    assert stats.prefill_tokens_per_s == pytest.approx(4000 - 0.2 * 2000)   # as if 2,000/s
    stats.observe_prefill(2_000_000, 0.5)                    # a queue counted twice over
    assert stats.prefill_tokens_per_s == pytest.approx(3600 + 0.2 * 3600)   # as if 7,200/s
    for _ in range(40):                                      # a real change is followed
        stats.observe_prefill(1000, 0.5)
    assert stats.prefill_tokens_per_s == pytest.approx(2000, rel=0.01)


def test_the_fleet_backlog_drains_at_the_upstream_rate_shared_by_size() -> None:
    stats = LiveStats(capacity=4)
    stats.add_backlog(3000, 4000, now=100.0)
    stats.take_peers(backlog=1000, admitted=2, at=100.0)   # the peers': a quarter of it
    own, theirs = stats.backlog(4000, 100.5), stats.peers_backlog(4000, 100.5)
    assert (4000 - own - theirs) == pytest.approx(2000)     # the fleet drains at the rate
    assert (own, theirs) == (pytest.approx(1500), pytest.approx(500))
    assert stats.fleet_backlog(4000, 100.5) == pytest.approx(2000)
    stats.take_peers(backlog=3000, admitted=2, at=100.0)   # two equal backlogs: rate / 2 each
    assert stats.backlog(4000, 100.5) == pytest.approx(2000)
    assert stats.peers_backlog(4000, 100.5) == pytest.approx(2000)
    stats = LiveStats(capacity=4)
    stats.add_backlog(12000, 4000, now=100.0)
    stats.take_peers(backlog=12000, admitted=2, at=100.0)
    assert stats.backlog(4000, 101.0) == pytest.approx(10000)
    assert stats.backlog(4000, 101.5) == pytest.approx(6000)   # peers stale: alone again


def test_kv_pressure_waits_for_the_first_sequence_to_finish_where_a_slot_is_free() -> None:
    stats = LiveStats(capacity=16, slot_s=2.0, prefill_tokens_per_s=1e9)
    stats.take_upstream(running=8, waiting=0, kv=1.0, now=time.monotonic())
    assert stats.kv_wait_s(1.0) == pytest.approx(2.0 / 8)   # a full cache, 8 running
    assert stats.predicted_ttft_s(0, default_prefill=1e9) == pytest.approx(0.25)
    stats.take_upstream(running=8, waiting=0, kv=0.95, now=time.monotonic())
    assert stats.kv_wait_s(1.0) == pytest.approx(0.5 * 2.0 / 8)
    stats.admitted = 16                   # every slot held: the queue wait already covers it
    assert stats.predicted_ttft_s(0, default_prefill=1e9) == pytest.approx(
        stats.queue_wait_s(0, 1.0))


def test_a_full_model_predicts_a_queue_wait() -> None:
    stats = LiveStats(capacity=2, admitted=2, queued=3, slot_s=2.0)
    assert stats.queue_wait_s(stats.queued, 1.0) == pytest.approx((3 + 1) * 2.0 / 2)
    assert stats.predicted_ttft_s(0, default_prefill=1000) >= 4.0


def test_tpot_follows_concurrency() -> None:
    stats = LiveStats(capacity=16, batch_slowdown=0.05)
    stats.admitted = 1
    for _ in range(30):
        stats.observe_tpot(0.02)                             # measured alone
    stats.admitted = 11
    assert stats.predicted_tpot_s(default=0.5) == pytest.approx(0.02 * 1.55)


def test_a_model_unused_for_a_while_is_judged_by_its_defaults_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A model routed away from for its latency gets no answer to learn it is fast again:
    what was learned stops counting after LEARNED_STALE_S, and the next sample starts
    afresh rather than being averaged into the stale figure."""
    clock = [1000.0]
    monkeypatch.setattr("core.types.time.monotonic", lambda: clock[0])
    stats = LiveStats()
    for _ in range(5):
        stats.observe_tpot(0.09)                       # a slow spell
        stats.observe_prefill(100, 1.0)                # 100 tokens/s
    assert stats.predicted_tpot_s(default=0.01) == pytest.approx(0.09)
    assert stats.predicted_ttft_s(1000, default_prefill=10_000) == pytest.approx(10.0)
    clock[0] += LEARNED_STALE_S + 1
    assert stats.predicted_tpot_s(default=0.01) == pytest.approx(0.01)
    assert stats.predicted_ttft_s(1000, default_prefill=10_000) == pytest.approx(0.1)
    stats.observe_tpot(0.02)
    assert stats.tpot_s == pytest.approx(0.02)         # not 0.09 moved a fifth of the way
    assert stats.prefill_tokens_per_s is None          # relearned from the next answer


def test_the_scheduler_and_the_router_forget_a_stale_prefill_rate_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler's admission reads the same learned rate as the router's
    prediction: a stale one would refuse what the router sends it (slo_unreachable),
    and the model would never answer again to relearn it."""
    clock = [1000.0]
    monkeypatch.setattr("core.types.time.monotonic", lambda: clock[0])
    stats = LiveStats()
    stats.observe_prefill(100, 1.0)
    assert stats.learned_prefill() == pytest.approx(100.0)
    clock[0] += LEARNED_STALE_S + 1
    assert stats.learned_prefill() is None


def test_windowed_p95_and_error_rate() -> None:
    stats = LiveStats()
    for i in range(100):
        stats.observe_ttft(i / 100)
    assert stats.ttft_p95 == pytest.approx(0.95, abs=0.02)
    for ok in [True] * 10 + [False] * 10:
        stats.observe_outcome(ok)
    assert 0.5 < stats.error_rate < 1.0


def test_max_slo_premium_bounds_what_meeting_the_slo_may_cost() -> None:
    cfg = config()          # at target 0.75: mid (1.0) meets quality, big (5.0) is 5x dearer
    capped = cfg.model_copy(update={"pools": cfg.pools.model_copy(update={
        "interactive": cfg.pools.interactive.model_copy(update={"max_slo_premium": 4.0})})})
    late_mid = cands(cfg, mid=5.0)
    assert get_policy("slo_aware", cfg).choose(ctx(), late_mid).model == "big"   # unbounded
    decision = get_policy("slo_aware", capped).choose(ctx(), late_mid)
    assert (decision.model, decision.slo) == ("mid", AT_RISK)    # big is past 4x mid's price
    assert get_policy("slo_aware", capped).choose(ctx(), cands(cfg)).model == "mid"
    batch = get_policy("slo_aware", capped).choose(ctx(pool="batch"), late_mid)
    assert batch.model == "mid" and batch.slo is None            # batch has no SLO to buy
