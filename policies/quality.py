"""``quality``: the cheapest candidate that will most likely answer correctly,
whatever its queue; the baseline the SLO-aware policy is measured against.

    choose the cheapest candidate with P(correct) >= quality target
    none qualifies -> the best value: argmax P - kappa * cost / max cost (policies/selection.py)

Above a team's soft budget limit the target drops by
``budget.soft_limit_quality_drop`` so the team moves to cheaper models.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.config import GatewayConfig
from policies.base import Candidate, Decision, RouteContext
from policies.selection import select


class QualityPolicy:
    name = "quality"

    def __init__(self, config: GatewayConfig) -> None:
        self.soft_drop = config.budget.soft_limit_quality_drop
        self.kappa = config.routing.unreachable_price_weight

    def target(self, ctx: RouteContext) -> float:
        return ctx.quality_target - (self.soft_drop if ctx.soft_limited else 0.0)

    def select(self, candidates: list[Candidate], target: float, among: Sequence[int]
               ) -> tuple[int, bool]:
        """(index into ``candidates``, whether it meets ``target``), among ``among``."""
        idx = list(among)
        i, met = select([candidates[j].p_correct for j in idx],
                        [candidates[j].cost_usd for j in idx], target, kappa=self.kappa,
                        tiebreak=[candidates[j].latency_s for j in idx])
        return idx[i], met

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision:
        pick, met = self.select(candidates, self.target(ctx), range(len(candidates)))
        return decide(ctx, candidates[pick], "quality-met" if met else
                      "quality-unreachable-best-value")


def decide(ctx: RouteContext, best: Candidate, reason: str, slo: str | None = None) -> Decision:
    if ctx.soft_limited:
        reason += ";soft-limit"
    return Decision(
        model=best.name, reason=reason, predicted_cost_usd=best.cost_usd,
        predicted_latency_s=best.latency_s, predicted_quality=round(best.p_correct, 4),
        confidence=None if ctx.confidence is None else round(ctx.confidence, 4), slo=slo)
