"""``cost_quality``: the cheapest candidate that will most likely answer correctly.

    P(correct | prompt, model): ``Candidate.p_correct``, computed by the router
    choose the cheapest candidate with P >= quality target
           (interactive pool: among those whose predicted latency meets the SLO first)
    none qualifies -> the best value: argmax P - kappa * cost / max cost (policies/selection.py)

Ties in cost go to the lower predicted latency. What to try next if this
answer fails is the router's ladder (``gateway/ladder.py``), the same for every
policy.
Above a team's soft budget limit the target drops by
``budget.soft_limit_quality_drop`` so the team moves to cheaper models.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.config import GatewayConfig
from policies.base import Candidate, Decision, RouteContext
from policies.selection import select


class CostQualityPolicy:
    name = "cost_quality"

    def __init__(self, config: GatewayConfig) -> None:
        self.soft_drop = config.budget.soft_limit_quality_drop
        self.kappa = config.routing.unreachable_price_weight
        slo = config.pools.interactive
        self.slo_ttft_s = slo.ttft_ms / 1000
        self.slo_tpot_s = slo.tpot_ms / 1000

    def meets_slo(self, ctx: RouteContext, c: Candidate) -> bool:
        if ctx.pool != "interactive":
            return True
        return c.ttft_s <= self.slo_ttft_s and c.tpot_s <= self.slo_tpot_s

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision:
        target = ctx.quality_target - (self.soft_drop if ctx.soft_limited else 0.0)
        q = [c.p_correct for c in candidates]
        # Interactive traffic first looks among models predicted to meet the SLO.
        fast = [i for i, c in enumerate(candidates) if self.meets_slo(ctx, c)]
        pick, met = self._select(candidates, q, target, fast) if fast else (0, False)
        reason = "quality-met"
        if not met:
            pick, met = self._select(candidates, q, target, range(len(candidates)))
            reason = "quality-met-slo-missed" if met else "quality-unreachable-best-value"
        if ctx.soft_limited:
            reason += ";soft-limit"
        best = candidates[pick]
        return Decision(
            model=best.name, reason=reason, predicted_cost_usd=best.cost_usd,
            predicted_latency_s=best.latency_s, predicted_quality=round(q[pick], 4),
            confidence=None if ctx.confidence is None else round(ctx.confidence, 4),
        )

    def _select(self, candidates: list[Candidate], q: list[float], target: float,
                among: Sequence[int]) -> tuple[int, bool]:
        idx = list(among)
        i, met = select([q[j] for j in idx], [candidates[j].cost_usd for j in idx], target,
                        kappa=self.kappa, tiebreak=[candidates[j].latency_s for j in idx])
        return idx[i], met
