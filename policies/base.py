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
from typing import TYPE_CHECKING, Protocol

from backends.base import LiveStats
from gateway.config import GatewayConfig, ModelConfig

if TYPE_CHECKING:
    from classifiers.complexity import ComplexityModel, PromptScore


@dataclass(frozen=True, slots=True)
class RouteContext:
    prompt_tokens: int
    expected_output_tokens: int
    pool: str
    quality_target: float
    score: PromptScore | None = None
    soft_limited: bool = False
    has_tools: bool = False
    has_response_format: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    model: ModelConfig
    stats: LiveStats
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
    alternatives: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = field(default=())


class Policy(Protocol):
    name: str

    def choose(self, ctx: RouteContext, candidates: list[Candidate]) -> Decision: ...


class PolicyFactory(Protocol):
    def __call__(self, config: GatewayConfig, classifier: ComplexityModel | None = None
                 ) -> Policy: ...
