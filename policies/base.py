"""What a routing policy sees and what it returns.

    policy = get_policy("cheapest", config)
    decision = policy.choose(context, candidates)
    decision.model, decision.reason, decision.fallbacks

A policy is a pure function of validated config, the request's features and
the live backend stats; it never does I/O. Candidates arrive already filtered
(context window, pool, team permissions), so a policy only ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from core.config import GatewayConfig, ModelFacts
from core.types import LiveStats


@dataclass(frozen=True, slots=True)
class RouteContext:
    prompt_tokens: int
    expected_output_tokens: int
    pool: str
    quality_target: float
    confidence: float | None = None    # the classifier's, when it scored the prompt
    soft_limited: bool = False
    has_tools: bool = False
    has_response_format: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    model: ModelFacts
    stats: LiveStats
    p_correct: float           # predicted P(correct), computed once by the router
    cost_usd: float            # predicted, at the expected output length
    ttft_s: float              # predicted time to first token (queue + prefill)
    tpot_s: float              # predicted time per output token
    latency_s: float           # predicted time to the last token

    @property
    def name(self) -> str:
        return self.model.name


@dataclass(frozen=True, slots=True)
class Decision:
    model: str
    reason: str
    predicted_cost_usd: float
    predicted_latency_s: float | None = None
    predicted_quality: float | None = None
    confidence: float | None = None
    fallbacks: tuple[str, ...] = field(default=())   # the ladder, set by the router
    pool: str = "interactive"                        # set by the router; the scheduler's lane
    slo: str | None = None     # "at-risk": predicted to miss its pool's SLO, best there was


class Policy(Protocol):
    name: str

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision: ...


class PolicyFactory(Protocol):
    def __call__(self, config: GatewayConfig) -> Policy: ...
