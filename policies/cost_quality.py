"""``cost_quality``: the cheapest candidate that will most likely answer correctly.

    P(correct | prompt, model) = classifier.p_correct(score, model.ability, model.family)
    choose the cheapest candidate with P >= quality target
           (interactive pool: among those whose predicted latency meets the SLO first)
    none qualifies -> the candidate with the highest P

Ties in cost go to the lower predicted latency. Fallbacks keep quality: the
other qualifying models by cost, then the rest by P(correct), strongest first.
Above a team's soft budget limit the target drops by
``budget.soft_limit_quality_drop`` so the team moves to cheaper models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.config import GatewayConfig
from policies.base import Candidate, Decision, RouteContext

if TYPE_CHECKING:
    from classifiers.complexity import ComplexityModel


class CostQualityPolicy:
    name = "cost_quality"

    def __init__(self, config: GatewayConfig, classifier: ComplexityModel | None = None) -> None:
        self.classifier = classifier
        self.max_attempts = config.routing.max_attempts
        self.soft_drop = config.budget.soft_limit_quality_drop
        slo = config.pools.interactive
        self.slo_ttft_s = slo.ttft_ms / 1000
        self.slo_tpot_s = slo.tpot_ms / 1000

    def quality(self, ctx: RouteContext, c: Candidate) -> float:
        if ctx.score is None or self.classifier is None:
            return c.model.ability
        return self.classifier.p_correct(ctx.score, c.model.ability, c.model.family)

    def meets_slo(self, ctx: RouteContext, c: Candidate) -> bool:
        if ctx.pool != "interactive":
            return True
        return c.ttft_s <= self.slo_ttft_s and c.tpot_s <= self.slo_tpot_s

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision:
        target = ctx.quality_target - (self.soft_drop if ctx.soft_limited else 0.0)
        q = {c.name: self.quality(ctx, c) for c in candidates}
        by_cost = sorted(candidates, key=lambda c: (round(c.cost_usd, 12), c.latency_s))
        meeting = [c for c in by_cost if q[c.name] >= target]
        fast = [c for c in meeting if self.meets_slo(ctx, c)]
        if fast or meeting:
            best = (fast or meeting)[0]
            reason = "quality-met" if fast or ctx.pool != "interactive" else "quality-met-slo-missed"
        else:
            best = max(by_cost, key=lambda c: (q[c.name], -c.cost_usd))
            reason = "quality-unreachable-best-available"
        if ctx.soft_limited:
            reason += ";soft-limit"
        strongest = sorted(candidates, key=lambda c: -q[c.name])
        chain = [c for c in meeting if c is not best] + [
            c for c in strongest if c is not best and c not in meeting]
        return Decision(
            model=best.name, reason=reason, predicted_cost_usd=best.cost_usd,
            predicted_latency_s=best.latency_s, predicted_quality=round(q[best.name], 4),
            confidence=None if ctx.score is None else round(ctx.score.confidence, 4),
            alternatives=tuple(f"{c.name}:{q[c.name]:.3f}:{c.cost_usd:.2e}" for c in by_cost
                               if c is not best),
            fallbacks=tuple(c.name for c in chain[: self.max_attempts - 1]),
        )
