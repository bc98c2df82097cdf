"""Turning a request into a Decision: which models may serve it, then the policy.

    decision = router.choose(req, caller, features)

Hard constraints are applied here, once, for every policy: the model exists,
the team may use it and the pool, prompt plus output fits its context
window, and ``max_tokens`` is within its maximum. Policies only rank.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from backends.base import Backend
from core.config import GatewayConfig, ModelConfig, ModelFacts
from core.errors import InvalidRequest, ModelNotFound
from core.types import LiveStats
from gateway.auth import Caller
from gateway.money.pricing import cost_usd, pool_rate
from gateway.pipeline.features import DEFAULT_EXPECTED_OUTPUT, RequestFeatures, Scorer
from gateway.pipeline.ladder import Ladder, climb_on
from gateway.pipeline.request import CHAT, EMBEDDING, ModelRequest
from policies import Candidate, Decision, Policy, RouteContext, get_policy
from policies.slo import AT_RISK, SLO
from scheduling.breaker import Breaker
from scheduling.scheduler import DEFAULT_PREFILL_TOKENS_PER_S

if TYPE_CHECKING:
    from classifiers.complexity import ComplexityModel

DEFAULT_TPOT_S = 0.03


def predicted_timing(model: ModelFacts, stats: LiveStats, prompt_tokens: int
                     ) -> tuple[float, float]:
    """(TTFT, TPOT) this request would see on ``model`` now.

    TTFT = expected wait in the model's scheduler queue + (prefill backlog +
    this prompt) / the prefill rate learned from real answers; TPOT follows
    concurrency (``core.types.LiveStats``). Before any answer, the simulator's
    knobs stand in for what is learned."""
    sim = model.simulate
    base_tpot = sim.tpot_ms / 1000 if sim else DEFAULT_TPOT_S
    prefill = sim.prefill_tokens_per_s if sim else DEFAULT_PREFILL_TOKENS_PER_S
    slot_s = (stats.ttft_s or 0.0) + (stats.tpot_s or base_tpot) * DEFAULT_EXPECTED_OUTPUT
    return (stats.predicted_ttft_s(prompt_tokens, prefill, slot_s),
            stats.predicted_tpot_s(base_tpot))


def allowed(model: ModelConfig | ModelFacts, caller: Caller, pool: str) -> bool:
    if caller.allowed_models is not None and model.name not in caller.allowed_models:
        return False
    if caller.allowed_pools is not None and pool not in caller.allowed_pools:
        return False
    return pool in model.pools


def usable_models(config: GatewayConfig, caller: Caller) -> list[ModelConfig]:
    """The models ``caller``'s team may use, in some pool it may use (``/v1/models``)."""
    return [m for m in config.models if any(allowed(m, caller, pool) for pool in m.pools)]


class Router:
    def __init__(self, config: GatewayConfig, backends: dict[str, Backend],
                 classifier: ComplexityModel | None = None,
                 breakers: dict[str, Breaker] | None = None,
                 team_classifiers: dict[str, ComplexityModel] | None = None) -> None:
        """``team_classifiers``: by path, the models that ``teams[].classifier`` name."""
        self.config = config
        self.backends = backends
        self.classifier = classifier
        self.breakers = breakers or {}
        self.auto_policy: Policy = get_policy(config.routing.auto_policy, config)
        self.encodings = {m.tokenizer for m in config.models}
        # Names and aliases, looked up per request; auto routes among the chat models.
        # Each model as the request path reads it (core.model_config.ModelFacts), by name.
        self.facts = {m.name: ModelFacts.of(m) for m in config.models}
        self._models = {n: self.facts[m.name] for m in config.models
                        for n in (m.name, *m.aliases)}
        self._routable = [self.facts[m.name] for m in config.models if m.kind == "chat"]
        # Named models with replicas to choose among by warm prefix (warm_matters).
        self._replicated = {n for m in config.models for n in (m.name, *m.aliases)
                            if len(m.base_urls) > 1}
        self._cache_aware = config.routing.cache_aware      # read per request
        self._ladder = Ladder.of(config.escalation, config.routing.max_attempts)
        self.slo = SLO.from_config(config)
        self._default = Scorer.of(classifier, config) if classifier is not None else None
        self._scorers = {path: Scorer.of(m, config) for path, m in (team_classifiers or {}).items()}

    def use_team_classifiers(self, models: dict[str, ComplexityModel]) -> None:
        """Route the teams that name these paths (``teams[].classifier``) by them
        from now on (a config reload)."""
        self._scorers = {path: Scorer.of(m, self.config) for path, m in models.items()}

    def scorer(self, req: ModelRequest, caller: Caller) -> Scorer | None:
        """The team's classifier (``teams[].classifier``, else ``routing.classifier``),
        only when it changes something: a routed request, or a simulated model
        whose correctness draw uses the prediction."""
        path = caller.classifier
        scorer = self._scorers.get(path, self._default) if path else self._default
        if scorer is None or req.operation == EMBEDDING:
            return None
        if req.routed:
            return scorer
        model = self._models.get(req.model)
        return scorer if model is not None and model.backend == "simulated" else None

    def warm_matters(self, req: ModelRequest) -> bool:
        """Whether a warm prefix can change this request's path: a choice among models
        (``auto``), or among a named model's replicas. A request that names a model of one
        replica has none to make, and pays nothing for the record."""
        if not self._cache_aware or req.operation != CHAT:
            return False
        return req.routed or req.model in self._replicated

    def predicted_quality(self, model: ModelFacts, features: RequestFeatures) -> float:
        """P(correct) of ``model`` on this prompt: the one place it is computed.
        Without a score (classifier off, or not needed) it is the model's ability."""
        if features.score is None or features.scorer is None:
            return model.ability
        return features.scorer.p_correct(features.score, model)

    def _candidate(self, model: ModelFacts, features: RequestFeatures, rate: float
                   ) -> Candidate:
        """``model``'s predictions for this request. What its upstream probably still caches
        of this conversation (``features.warm``: the turns it served) costs the cached
        price and needs no prefill: a session stays where its prefix is warm unless
        another model meeting the target is cheaper even so, or the target needs it."""
        prompt = features.prompt_tokens(model.tokenizer)
        cached = features.cached_tokens(model)
        out = min(features.expected_output_tokens, model.max_output_tokens)
        stats = self.backends[model.name].stats
        ttft, tpot = predicted_timing(model, stats, prompt - cached)
        quality = self.predicted_quality(model, features)
        written = features.written_tokens(model, cached)
        return Candidate(model, stats, quality,
                         cost_usd(model, prompt, out, rate, cached, written,
                                  written > 0 and features.writes_an_hour(model)), ttft,
                         tpot, ttft + tpot * out)

    def _fits(self, model: ModelFacts, req: ModelRequest, features: RequestFeatures) -> bool:
        out = req.max_tokens or 1
        if req.max_tokens and req.max_tokens > model.max_output_tokens:
            return False
        return features.prompt_tokens(model.tokenizer) + out <= model.context_window

    def _explicit(self, req: ModelRequest, caller: Caller, features: RequestFeatures,
                  pool: str) -> Decision:
        model = self._models.get(req.model)
        if model is None or not allowed(model, caller, pool):
            raise ModelNotFound(req.model)
        if (model.kind == "embedding") != (req.operation == EMBEDDING):
            what = ("an embedding model: use /v1/embeddings" if model.kind == "embedding"
                    else "not an embedding model")
            raise InvalidRequest(f"The model `{req.model}` is {what}.", param="model",
                                 code="model_not_supported")
        if req.max_tokens and req.max_tokens > model.max_output_tokens:
            raise InvalidRequest(
                f"max_tokens is too large: {req.max_tokens}. This model supports at most "
                f"{model.max_output_tokens} completion tokens.", param="max_tokens")
        if not self._fits(model, req, features):
            raise InvalidRequest(
                f"This model's maximum context length is {model.context_window} tokens; the "
                f"request needs {features.prompt_tokens(model.tokenizer)} prompt tokens plus "
                "its output.", param="messages", code="context_length_exceeded")
        c = self._candidate(model, features, pool_rate(self.config, pool))
        return Decision(model=model.name, reason="requested", predicted_cost_usd=c.cost_usd,
                        predicted_latency_s=c.latency_s, pool=pool,
                        slo=None if self.slo.met(pool, c) else AT_RISK)

    def choose(self, req: ModelRequest, caller: Caller, features: RequestFeatures,
               pool: str = "interactive", soft_limited: bool = False) -> Decision:
        if not req.routed:
            return self._explicit(req, caller, features, pool)
        if req.operation == EMBEDDING:
            raise InvalidRequest("Embeddings are not routed: name an embedding model.",
                                 param="model", code="model_not_supported")
        usable = [m for m in self._routable if allowed(m, caller, pool)]
        if not usable:
            raise ModelNotFound(req.model)
        rate = pool_rate(self.config, pool)
        fitting = [self._candidate(m, features, rate) for m in usable
                   if self._fits(m, req, features)]
        if not fitting:
            largest = max(m.max_output_tokens for m in usable)
            if req.max_tokens and req.max_tokens > largest:
                raise InvalidRequest(f"max_tokens is too large: {req.max_tokens}. No model "
                                     f"supports more than {largest}.", param="max_tokens")
            raise InvalidRequest("The prompt plus max_tokens fits no model's context window.",
                                 param="messages", code="context_length_exceeded")
        quality = req.quality if req.quality is not None else caller.quality
        ctx = RouteContext(
            prompt_tokens=max(features.token_counts.values()),
            expected_output_tokens=features.expected_output_tokens, pool=pool,
            quality_target=quality, soft_limited=soft_limited,
            confidence=None if features.score is None else features.score.confidence,
            has_tools=req.has_tools, has_response_format=req.has_response_format)
        # A model whose breaker is open (or that asked us to back off) is not a
        # candidate, unless every model is out: then all are tried.
        healthy = [c for c in fitting if self._available(c.name)] or fitting
        decision = replace(self.auto_policy.choose(ctx, healthy), pool=pool)
        if decision.confidence is None and ctx.confidence is not None:
            decision = replace(decision, confidence=round(ctx.confidence, 4))
        scorer = features.scorer
        decision = climb_on(self._ladder, decision, healthy,
                            scorer.model.pair_ladder if scorer is not None and scorer.pairs else ())
        if decision.slo is None:
            # Whatever the policy weighed, the client hears when its first
            # model is predicted to miss the pool's SLO.
            first = next(c for c in healthy if c.name == decision.model)
            decision = replace(decision, slo=None if self.slo.met(pool, first) else AT_RISK)
        return decision

    def _available(self, name: str) -> bool:
        breaker = self.breakers.get(name)
        return breaker is None or breaker.available()
