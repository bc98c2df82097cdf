"""The escalation ladder: which models a request may climb to after the first choice.

    decision = climb(policy_decision, candidates, config.escalation, max_attempts=3)
    decision.model, decision.fallbacks        # first try, then the rungs above it

One ladder serves both reasons to move on: an upstream that failed, and an
answer that failed its checks (``gateway.pipeline.dispatch``). The rungs above a
choice are the candidates predicted at least as likely to be correct,
cheapest first (or ``escalation.ladder``'s order when configured), at most
``escalation.max_steps`` of them. Between two models of a ladder ``routegate
learn`` fitted pair heads along (``strength``, weakest first), the ladder says
which is above: a pair head can predict the weaker model more likely correct
on a prompt, and a refused answer must still climb to the stronger one. When the classifier is unsure of the
prompt (confidence below ``escalation.min_confidence``), the request starts
one rung up: reason ``low_confidence``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.escalation_config import EscalationConfig
from policies import Candidate, Decision

LOW_CONFIDENCE = "low_confidence"


@dataclass(frozen=True, slots=True)
class Ladder:
    """``escalation``'s ladder settings and ``routing.max_attempts``, read out of the
    config once (the router climbs on every routed request)."""

    order: tuple[str, ...] | None     # escalation.ladder
    max_steps: int | None             # escalation.max_steps, when escalation is on
    min_confidence: float | None      # escalation.min_confidence, when escalation is on
    max_attempts: int

    @classmethod
    def of(cls, config: EscalationConfig, max_attempts: int) -> Ladder:
        on = config.enabled
        return cls(tuple(config.ladder) if config.ladder else None,
                   config.max_steps if on else None,
                   config.min_confidence if on else None, max_attempts)


def rungs_above(chosen: str, candidates: list[Candidate], order: tuple[str, ...] | None,
                strength: Sequence[str] = ()) -> list[Candidate]:
    by_name = {c.name: c for c in candidates}
    if order:
        rungs = [by_name[n] for n in order if n in by_name]
        names = [c.name for c in rungs]
        return rungs[names.index(chosen) + 1:] if chosen in names else rungs
    floor = by_name[chosen].p_correct if chosen in by_name else 0.0
    if chosen in strength:
        rank = strength.index(chosen)
        above = [c for c in candidates if c.name != chosen and (
            strength.index(c.name) > rank if c.name in strength else c.p_correct >= floor)]
    else:
        above = [c for c in candidates if c.name != chosen and c.p_correct >= floor]
    return sorted(above, key=lambda c: (c.cost_usd, -c.p_correct))


def climb(decision: Decision, candidates: list[Candidate], config: EscalationConfig, *,
          max_attempts: int) -> Decision:
    return climb_on(Ladder.of(config, max_attempts), decision, candidates)


def climb_on(ladder: Ladder, decision: Decision, candidates: list[Candidate],
             strength: Sequence[str] = ()) -> Decision:
    """``strength``: the classifier's pair-head ladder, weakest first (none: ())."""
    steps = rungs_above(decision.model, candidates, ladder.order, strength)
    steps = steps[: max(0, ladder.max_attempts - 1)]
    if ladder.max_steps is not None:
        steps = steps[: ladder.max_steps]
    floor = ladder.min_confidence
    unsure = floor is not None and decision.confidence is not None and decision.confidence < floor
    if unsure and steps:
        first = steps[0]
        return replace(decision, model=first.name, reason=LOW_CONFIDENCE,
                       predicted_cost_usd=first.cost_usd, predicted_latency_s=first.latency_s,
                       predicted_quality=round(first.p_correct, 4),
                       fallbacks=tuple(c.name for c in steps[1:]))
    return replace(decision, fallbacks=tuple(c.name for c in steps))
