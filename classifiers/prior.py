"""A domain-free prior on difficulty, and how much training evidence backs the learned part.

    shape = shape_features(text)                   # size and shape of the request only
    prior = shape @ prior_w + prior_b              # fitted at training, see ``fit_prior``
    weight = closeness(n_seen_bigrams(feats, seen), reference)
    d = prior + weight * (learned - prior)

The learned difficulty is a function of n-grams fitted on benchmark questions.
A prompt with little in common with them (a greeting, a one-line chat
question) gives it almost no evidence, and its value is then noise around
the training mean; such prompts get the prior instead. ``closeness`` is the
number of the prompt's word bigrams whose hash bucket occurs in at least
``MIN_DOCS`` training prompts, relative to a low quantile of the same count
over the training prompts: a count (not a share), because "what is the
capital" is made of common bigrams, yet five common bigrams say little.
The same weight scales ``confidence``, so low confidence means "far from
the training data" and escalation on it has a signal.

The prior is fitted within each (source, task) of the training data: task
means are removed from both sides before the ridge fit, so it learns how
difficulty moves with size and shape inside a task (longer, more numbers,
more operators: harder), which is what carries over to a task the model has
never seen. How rare the prompt's words are (``classifiers/rarity.py``)
also places a task as a whole: what the within-task fit leaves of each
task's mean difficulty is regressed on its mean rarity, one point per task.
Left out one task at a time, this places the left-out task's mean better
(RMSE 0.663 against 0.693 for the shape prior alone, 23 tasks: ``python -m
lab.prior_check``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from classifiers import features
from classifiers.features import Features, bounded_window
from classifiers.rarity import rarity_features

MIN_DOCS = 2  # a bucket seen in one training prompt only says nothing general
PRIOR_ALPHA = 1.0

SHAPE_NAMES: tuple[str, ...] = (
    "log_tokens", "log_numbers", "log_operators", "questions", "log_sentences",
    "log_requests", "code_fence", "log_lines",
)
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)?")
# What _NUMBER_RE can match, kept; every other ASCII character a space. A match reads
# only digits, "." and ",", and whether a character is one of them: the same count on
# what ``split`` leaves of the copy, a third of the regular expression's time.
_NUMBER_CHARS = str.maketrans({chr(c): " " for c in range(128)
                               if not (chr(c).isdigit() or chr(c) in ".,")})
_SENTENCE_RE = re.compile(r"[.!?。？！](?:\s|$)")
_OPERATORS = "=+*/^<>"
# Stems that ask for a long, reasoned answer rather than a short fact.
_REQUEST_STEMS = (
    "prove", "proof", "derive", "show that", "design", "implement", "explain",
    "step by step", "in detail", "trade-off", "algorithm", "concurren", "optimi",
    "justify", "analy", "why ",
)


def shape_features(text: str, n_chars: int | None = None) -> np.ndarray:
    """Size and shape of the request, no benchmark vocabulary; bounded cost (``n_chars``:
    as ``featurize``'s)."""
    return np.asarray(shape_values(text, bounded_window(text).lower(), n_chars),
                      dtype=np.float64)


def shape_values(text: str, lowered: str, n_chars: int | None = None) -> tuple[float, ...]:
    """``shape_features`` of ``text`` whose lower-cased window is ``lowered``."""
    return (
        features.log_size(text, n_chars),
        math.log1p(_count_numbers(lowered)) / 4.0,
        math.log1p(sum(map(lowered.count, _OPERATORS))) / 4.0,
        min(lowered.count("?"), 10) / 10.0,
        math.log1p(len(_SENTENCE_RE.findall(lowered))) / 4.0,
        math.log1p(sum(map(lowered.count, _REQUEST_STEMS))) / 2.0,
        float("```" in lowered),
        math.log1p(lowered.count("\n")) / 5.0,
    )


def size_shape(text: str, n_chars: int | None = None) -> tuple[float, ...]:
    """``shape_values`` but the features that read the window (0.0 there): its size."""
    return (features.log_size(text, n_chars),) + (0.0,) * (len(SHAPE_NAMES) - 1)


def _count_numbers(lowered: str) -> int:
    """``len(_NUMBER_RE.findall(lowered))``."""
    if not lowered.isascii():    # str.translate is slow off ASCII; \d matches more there
        return len(_NUMBER_RE.findall(lowered))
    return len(_NUMBER_RE.findall(" ".join(lowered.translate(_NUMBER_CHARS).split())))


def bigram_buckets(feats: Features) -> np.ndarray:
    """Hash buckets of the word bigrams of featurized text (see ``Features.n_words``)."""
    n = feats.n_words
    return feats.indices[n:2 * n - 1] if n > 1 else feats.indices[:0]


def n_seen_bigrams(feats: Features, seen: np.ndarray) -> int:
    """How many of the prompt's distinct bigram buckets the training data has seen."""
    buckets = bigram_buckets(feats)
    # Distinct, of the seen ones: a set of a few hundred ints costs half of np.unique.
    return len(set(buckets[seen.take(buckets)].tolist()))


def closeness(n_seen: int, reference: float) -> float:
    """1 at or above ``reference`` seen bigrams, falling linearly to 0 with none."""
    return min(1.0, n_seen / reference) if reference > 0 else 1.0


def seen_buckets(bigrams: Sequence[np.ndarray], n_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(bucket seen in >= MIN_DOCS prompts, each prompt's seen count excluding itself)."""
    unique = [np.unique(b) for b in bigrams]
    docs = np.zeros(n_buckets, dtype=np.int32)
    for buckets in unique:
        docs[buckets] += 1
    # A training prompt's own occurrence does not count as evidence for it.
    own = np.asarray([np.count_nonzero(docs[b] - 1 >= MIN_DOCS) for b in unique])
    return docs >= MIN_DOCS, own


def prior_inputs(prompts: Sequence[str], table: np.ndarray
                 ) -> tuple[list[Features], np.ndarray, np.ndarray]:
    """(featurized prompts, their shape features, their word rarity) for fitting the prior."""
    feats = [features.featurize(p) for p in prompts]
    shape = np.vstack([shape_features(p) for p in prompts])
    return feats, shape, np.vstack([rarity_features(f, table) for f in feats])


def fit_prior(x: np.ndarray, learned: np.ndarray, groups: Sequence[str],
              between: Sequence[int] = ()) -> tuple[np.ndarray, float]:
    """(weights, intercept): within-group ridge of the learned difficulty on ``x``, plus,
    for the columns ``between``, a ridge of what that leaves of the group means on
    those columns' group means (each group one point)."""
    # Training only: sklearn takes 0.8 s to import, which every gateway start paid.
    from sklearn.linear_model import Ridge

    labels = np.asarray(groups)
    names = np.unique(labels)
    means = np.vstack([x[labels == g].mean(axis=0) for g in names])
    targets = np.asarray([learned[labels == g].mean() for g in names], dtype=np.float64)
    xc, y = x.astype(np.float64).copy(), learned.astype(np.float64).copy()
    for g, mean, target in zip(names, means, targets, strict=True):
        mask = labels == g
        xc[mask] -= mean
        y[mask] -= target
    coef = Ridge(alpha=PRIOR_ALPHA, fit_intercept=False).fit(xc, y).coef_.astype(np.float64)
    if not between:
        return coef, float(learned.mean() - x.mean(axis=0) @ coef)
    cols = list(between)
    level = Ridge(alpha=PRIOR_ALPHA).fit(means[:, cols], targets - means @ coef)
    coef[cols] += level.coef_
    return coef, float(level.intercept_)
