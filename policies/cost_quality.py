"""``slo_aware`` (alias ``cost_quality``): the cheapest candidate that will most
likely answer correctly and is predicted to meet its pool's SLO.

    P(correct | prompt, model): ``Candidate.p_correct``, computed by the router
    TTFT, TPOT: ``Candidate.ttft_s``, ``tpot_s``, predicted by the router from
                the model's queue, prefill backlog and learned rates
    1. the cheapest candidate meeting the quality target and the SLO
    2. none: among those meeting the quality target, the best predicted
       latency (the one missing the SLO by least)                 -> at-risk
    3. no candidate meets the quality target: the best value among those
       meeting the SLO (policies/selection.py), else among all    -> at-risk
       when the choice misses the SLO

A saturated model thus gives way to the next cheapest one that still meets
the target, but not past ``pools.interactive.max_slo_premium`` times the
price of the cheapest one that does: what the SLO may cost is the operator's
call (a model 25 times dearer serves one more request on time, at the price
of 25). Batch-pool requests have no TTFT SLO: for them this is the
``quality`` policy. What to try next if this answer fails is the router's
ladder (``gateway/pipeline/ladder.py``), the same for every policy.
"""

from __future__ import annotations

from core.config import GatewayConfig
from policies.base import Candidate, Decision, RouteContext
from policies.quality import QualityPolicy, decide
from policies.slo import AT_RISK, SLO


class SLOAwarePolicy(QualityPolicy):
    name = "slo_aware"

    def __init__(self, config: GatewayConfig) -> None:
        super().__init__(config)
        self.slo = SLO.from_config(config)
        self.max_premium = config.pools.interactive.max_slo_premium

    def meets_slo(self, ctx: RouteContext, c: Candidate) -> bool:
        return self.slo.met(ctx.pool, c)

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision:
        target = self.target(ctx)
        good = [c for c in candidates if c.p_correct >= target]
        if good and self.max_premium is not None and ctx.pool == "interactive":
            bound = self.max_premium * min(c.cost_usd for c in good)
            candidates = [c for c in candidates if c.cost_usd <= bound]
            good = [c for c in good if c.cost_usd <= bound]
        fast = [i for i, c in enumerate(candidates) if self.meets_slo(ctx, c)]
        if fast:
            pick, met = self.select(candidates, target, fast)
            if met:
                return decide(ctx, candidates[pick], "quality-met")
        if good:
            best = min(good, key=lambda c: (self.slo.slack(c), c.cost_usd))
            return decide(ctx, best, "quality-met-slo-missed", AT_RISK)
        if fast:
            return decide(ctx, candidates[pick], "quality-unreachable-best-value")
        pick, _ = self.select(candidates, target, range(len(candidates)))
        return decide(ctx, candidates[pick], "quality-unreachable-best-value", AT_RISK)


CostQualityPolicy = SLOAwarePolicy   # the name existing configs and imports use
