"""``routegate learn`` end to end on labels: the item-response refit, then the pair heads.

    outcome = learn_with_pairs(current, labels, texts, ladder, seed=0)
    outcome.result            # the refit's held-out figures (lab/learning.py)
    outcome.pairs             # per neighbouring pair: heads, intervals, the choice
    outcome.writable          # every compared pair's kept head gains, interval above 0

This is what the command runs and what ``python -m lab.new_traffic`` scores:
one function, so the table measures what ``learn`` writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from classifiers.complexity import ComplexityModel
from classifiers.labels import Labels
from classifiers.pair_heads import PairHead
from classifiers.static_embedding import StaticEmbedding, StaticEmbeddingError, shared_static
from lab.learning import HELD_FRACTION, Base, Fit, Result, fit_labels, gain, learn
from lab.pair_heads import MIN_PROMPTS, PairData, PairResult, fit_pairs


@dataclass
class Outcome:
    result: Result
    base: Base
    final: Fit                      # the refit on every label, what is written
    ladder: list[str]
    pairs: list[PairResult]
    static: StaticEmbedding | None
    n_prompts: int

    @property
    def compared(self) -> list[PairResult]:
        return [p for p in self.pairs if p.chosen is not None]

    @property
    def writable(self) -> bool:
        return bool(self.compared) and all(p.passes for p in self.compared)

    @property
    def needs(self) -> int:
        """Labelled prompts short of ``MIN_PROMPTS`` (0: enough)."""
        return max(0, MIN_PROMPTS - self.n_prompts)

    @property
    def heads(self) -> list[PairHead]:
        return [p.head for p in self.pairs if p.head is not None]


def ladder_of(labels: Labels) -> list[str]:
    """The labelled models weakest first: by each one's mean lead over the others
    where both answered (``Labels.pair_scores``), not by overall means."""
    everything = np.ones(len(labels.prompts), dtype=bool)
    lead = np.zeros(len(labels.names))
    for i in range(len(labels.names)):
        for j in range(len(labels.names)):
            if i != j:
                index, a, b = labels.pair_scores(everything, i, j)
                lead[i] += float((a - b).mean()) if index.size else 0.0
    return [labels.names[i] for i in np.argsort(lead, kind="stable")]


def _static() -> StaticEmbedding | None:
    try:
        return shared_static()
    except StaticEmbeddingError:
        return None


def _before(current: ComplexityModel, labels: Labels, texts: Sequence[str | None]):
    """The current classifier's ranking for a pair, one scale for all its prompts: its
    own pair head's gain where it has one for the pair and can read every prompt (a head
    on the embedding needs each prompt's text; traffic keeps it only with
    ``logging.prompts``), else its ``difficulty``. Every prompt is scored from its sketch,
    as the labels were read, whether or not its text was kept."""
    scores = [current.score_features(p.feats, p.shape) for p in labels.prompts]
    difficulty = np.asarray([s.difficulty for s in scores])
    every_text = all(t is not None for t in texts)
    gains: list[dict[tuple[str, str], float]] | None = None

    def ranking(weak: str, strong: str) -> np.ndarray:
        nonlocal gains
        reads = current.head_reads_text((weak, strong))
        if reads is None or (reads and not every_text):
            return difficulty
        if gains is None:       # every pair's, once a prompt ("": a head that reads none)
            gains = [current.pair_gains(t or "", s) for s, t in zip(scores, texts, strict=True)]
        return np.asarray([g[(weak, strong)] for g in gains])
    return ranking


def learn_with_pairs(current: ComplexityModel, labels: Labels, texts: Sequence[str | None],
                     ladder: list[str] | None = None, seed: int = 0,
                     held_fraction: float = HELD_FRACTION) -> Outcome:
    result, base = learn(current, labels, seed=seed, held_fraction=held_fraction)
    final = fit_labels(base, labels, np.arange(len(labels)), result.fit.lam)
    ladder = ladder or ladder_of(labels)
    names = labels.names

    def irt_gain(weak: str, strong: str) -> np.ndarray:
        return gain(result.fit, base, names.index(strong), names.index(weak))

    static = _static()
    data = PairData(labels, texts, ladder, ~result.held, result.held)
    pairs = fit_pairs(data, _before(current, labels, texts), irt_gain, static)
    return Outcome(result, base, final, ladder, pairs, static, len(labels.prompts))
