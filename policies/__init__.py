"""Routing policies, registered by name (like RouteLLM's router registry).

    policy = get_policy("cheapest", config)
"""

from __future__ import annotations

from core.config import GatewayConfig
from policies.base import Candidate, Decision, Policy, PolicyFactory, RouteContext
from policies.cheapest import CheapestPolicy
from policies.cost_quality import SLOAwarePolicy
from policies.fixed import FixedPolicy
from policies.quality import QualityPolicy

POLICIES: dict[str, PolicyFactory] = {
    "cheapest": CheapestPolicy,
    "fixed": FixedPolicy,
    "quality": QualityPolicy,          # cheapest meeting the quality target, latency ignored
    "slo_aware": SLOAwarePolicy,       # ... and predicted to meet the pool's SLO
    "cost_quality": SLOAwarePolicy,    # the earlier name of slo_aware
}


def get_policy(name: str, config: GatewayConfig) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(POLICIES)}") from None
    return factory(config)


__all__ = ["Candidate", "Decision", "Policy", "RouteContext", "POLICIES", "get_policy"]
