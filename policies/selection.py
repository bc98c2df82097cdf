"""The cost/quality choice, as one pure function shared by the gateway's
``cost_quality`` policy and ``routegate eval`` (so what is evaluated is what
is served).

    index, met = select(quality=[0.4, 0.7, 0.9], cost=[1, 5, 20], target=0.6)   # (1, True)

- Some candidate reaches the target: the cheapest of those (ties: ``tiebreak``,
  lower first).
- None does: the best value, argmax P(correct) − κ·cost/max(cost). Paying the
  most expensive candidate's price instead of nothing must buy at least κ
  of P(correct). Without this, prompts that no model is likely to answer (a
  third of the development data) all went to the priciest model for a few
  points of probability. κ = 0.10 was chosen on held-out splits of the
  training data (classifiers/artifacts/PROVENANCE.md), never on the test set.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_KAPPA = 0.10


def select(quality: Sequence[float], cost: Sequence[float], target: float, *,
           kappa: float = DEFAULT_KAPPA, tiebreak: Sequence[float] | None = None
           ) -> tuple[int, bool]:
    """(index of the chosen candidate, whether it reaches ``target``)."""
    n = len(quality)
    tie = tiebreak if tiebreak is not None else [-q for q in quality]
    meeting = [i for i in range(n) if quality[i] >= target]
    if meeting:
        return min(meeting, key=lambda i: (cost[i], tie[i])), True
    top = max(cost) or 1.0
    return min(range(n), key=lambda i: (kappa * cost[i] / top - quality[i], tie[i])), False
