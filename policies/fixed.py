"""``fixed``: always ``routing.fixed_model`` (when it fits), for comparisons."""

from __future__ import annotations

from core.config import GatewayConfig
from core.errors import InvalidRequest
from policies.base import Candidate, Decision, RouteContext


class FixedPolicy:
    name = "fixed"

    def __init__(self, config: GatewayConfig) -> None:
        if not config.routing.fixed_model:
            raise ValueError("the fixed policy needs routing.fixed_model")
        self.model = config.routing.fixed_model

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision:
        match = next((c for c in candidates if c.name == self.model), None)
        if match is None:
            raise InvalidRequest(
                f"model {self.model} cannot serve this request (context window, pool or team)",
                param="messages", code="context_length_exceeded")
        return Decision(model=match.name, reason="fixed", predicted_cost_usd=match.cost_usd,
                        predicted_latency_s=match.latency_s)
