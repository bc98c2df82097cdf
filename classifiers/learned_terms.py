"""What ``routegate learn`` adds to the shipped complexity model (``lab/learning.py``
fits it, ``lab/learned_artifact.py`` writes it): a new d(x), abilities and offsets.

    terms = read_learned_terms(arrays)      # None for an artifact learn did not write
    d, offsets = terms.apply(d, feats, skill_posterior)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from classifiers import features


def sigmoid(x: float) -> float:
    """1 / (1 + e^-x), without overflow either way."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def logit(p: float) -> float:
    """sigmoid's inverse, ``p`` kept within [1e-6, 1 - 1e-6]."""
    p = min(max(p, 1e-6), 1.0 - 1e-6)
    return math.log(p / (1.0 - p))


@dataclass(frozen=True, slots=True)
class LearnedTerms:
    """What ``routegate learn`` fitted on top of the shipped model: d(x) becomes
    ``beta * d(x) + delta(x)``, and each labelled model has an ability and an
    offset by skill (``lab/learning.py``)."""
    hash_w: np.ndarray          # (N_HASH,) float32: delta's hashed weights
    dense_w: np.ndarray         # (N_DENSE,)
    beta: float
    names: list[str]
    skill_w: np.ndarray         # (names, skills)
    abilities: dict[str, float]
    weak: str                   # difficulty: how much ``strong`` is needed over ``weak``
    strong: str

    def apply(self, logit: float, feats: features.Features, skill: np.ndarray
              ) -> tuple[float, dict[str, float]]:
        delta = float(self.hash_w.take(feats.indices) @ feats.values) + float(self.dense_w @ feats.dense)
        own = self.skill_w @ skill
        return self.beta * logit + delta, dict(zip(self.names, own.tolist(), strict=True))


def read_learned_terms(arrays: dict[str, np.ndarray]) -> LearnedTerms | None:
    """The learned terms of an artifact ``routegate learn`` wrote, else None."""
    if "learned_hash_idx" not in arrays:
        return None
    hash_w = np.zeros(features.N_HASH, dtype=np.float32)
    hash_w[arrays["learned_hash_idx"].astype(np.int64)] = arrays["learned_hash_w"]
    names = [str(n) for n in arrays["learned_names"]]
    ability = arrays["learned_ability"].astype(float)
    return LearnedTerms(hash_w, arrays["learned_dense_w"].astype(np.float64),
                        float(arrays["learned_beta"][0]), names,
                        arrays["learned_skill_w"].astype(np.float64),
                        {n: sigmoid(a) for n, a in zip(names, ability, strict=True)},
                        str(arrays["learned_weak"][0]), str(arrays["learned_strong"][0]))
