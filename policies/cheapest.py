"""``cheapest``: the lowest predicted cost among the candidates, ignoring quality."""

from __future__ import annotations

from core.config import GatewayConfig
from policies.base import Candidate, Decision, RouteContext


def by_cost(candidates: list[Candidate]) -> list[Candidate]:
    """Cheapest first; ties go to the lower predicted latency."""
    return sorted(candidates, key=lambda c: (round(c.cost_usd, 12), c.latency_s))


class CheapestPolicy:
    name = "cheapest"

    def __init__(self, config: GatewayConfig) -> None:
        del config   # registered policies share one constructor; this one needs nothing

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision:
        ranked = by_cost(candidates)
        best = ranked[0]
        return Decision(
            model=best.name,
            reason="cheapest-fit",
            predicted_cost_usd=best.cost_usd,
            predicted_latency_s=best.latency_s,
        )
