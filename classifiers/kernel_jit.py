"""The compiled half of ``classifiers/kernel.py``: imported only when numba is there.

Each function is compiled by numba on its first call, cached on disk where a
directory for it can be written (the source tree's ``__pycache__``, else
``NUMBA_CACHE_DIR`` or the user's cache), else compiled in memory at each start.
"""

# Compiled code: numba types it from its arguments; mypy does not read it.
# mypy: ignore-errors

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from classifiers.features import CJK_RATIO, DIGIT_RATIO, NON_ASCII_RATIO, OPERATOR_RATIO
from classifiers.rarity import MAX_ZIPF as _MAX_ZIPF
from classifiers.rarity import RARE_ZIPF as _RARE_ZIPF
from classifiers.rarity import SCALE as _SCALE
from classifiers.rarity import SKIP as _SKIP


def _jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    try:
        return numba.njit(nogil=True, cache=True)(fn)
    except RuntimeError:     # no directory where the cache can be written
        return numba.njit(nogil=True)(fn)


@_jit
def _dot(a, b):
    """a @ b of two 1-d arrays (numba's @ would need SciPy's BLAS)."""
    total = 0.0
    for j in range(a.size):
        total += a[j] * b[j]
    return total


@_jit
def _distinct(values, n):
    """How many distinct ints in ``values[:n]`` (n at most a few thousand; all >= 0)."""
    size = 16
    while size < 2 * n:
        size *= 2
    slots = np.full(size, -1, dtype=np.int64)
    count = 0
    for j in range(n):
        v = values[j]
        h = (v * 2654435761) & (size - 1)
        while slots[h] != -1 and slots[h] != v:
            h = (h + 1) & (size - 1)
        if slots[h] == -1:
            slots[h] = v
            count += 1
    return count



@_jit
def score_window(raw, n_lower, dense_in, shape, semantic, word_t, space_t, hash_w, dense_w, bias,
            skill_hash_w, skill_shift, skill_dense_w, skill_bias, mean_offset_w,
            mean_offset_center, offset_w, offset_center, prior_w, prior_b, rarity_w,
            zipf, seen, seen_reference, learned_weight, l_hash_w, l_dense_w, l_beta,
            l_skill_w, hash_shift):
    """The score's arithmetic (``ComplexityModel.score_features`` with ``featurize``'s
    n-grams); returns (logit before the learned terms' beta, weight, skill posterior,
    offsets, learned offsets, learned logit)."""
    n = len(raw)
    mask = np.uint64(0xFFFFFFFF)
    knuth = np.uint64(2654435761)
    poly = np.uint64(0x100000001B3)
    # Word and punctuation tokens: a word's hash is the polynomial hash of its bytes.
    words = np.empty(n, dtype=np.uint64)
    nw = 0
    i = 0
    while i < n:
        b = raw[i]
        if word_t[b]:
            h = np.uint64(0)
            p = np.uint64(1)
            while i < n and word_t[raw[i]]:
                h += np.uint64(raw[i]) * p
                p *= poly
                i += 1
            words[nw] = h & mask
            nw += 1
        else:
            if not space_t[b]:
                words[nw] = np.uint64(b)
                nw += 1
            i += 1
    n_grams = n - 3 if n >= 4 else 0
    n_big = nw - 1 if nw > 1 else 0
    n_skills = skill_bias.size
    dense = np.empty(len(dense_in), dtype=np.float64)
    for j in range(len(dense_in)):
        dense[j] = np.float32(dense_in[j])     # featurize's dense vector is float32
    digits = 0
    operators = 0
    non_ascii = 0
    cjk = 0
    for j in range(n):
        b = raw[j]
        if 48 <= b <= 57:
            digits += 1
        elif b == 61 or b == 43 or b == 42 or b == 47 or b == 94 or b == 60 or b == 62:
            operators += 1
        elif b >= 0xC0:
            non_ascii += 1
            if 0xE3 <= b <= 0xED:
                cjk += 1
    chars = max(n_lower, 1)
    dense[DIGIT_RATIO] = np.float32(digits / chars)
    dense[OPERATOR_RATIO] = np.float32(operators / chars)
    dense[NON_ASCII_RATIO] = np.float32(non_ascii / chars)
    dense[CJK_RATIO] = np.float32(cjk / chars)
    hash_sum = 0.0
    learned_sum = 0.0
    skill = np.zeros(n_skills, dtype=np.float64)
    has_learned = l_hash_w.size > 0
    if n >= 4:
        scales = (1.0 / np.sqrt(nw) if nw else 0.0, 1.0 / np.sqrt(n_big) if n_big else 0.0,
                  1.0 / np.sqrt(n_grams))
        s0 = np.float32(scales[0])
        s1 = np.float32(scales[1])
        s2 = np.float32(scales[2])
        # Seen bigram buckets (distinct, counted below) and the rarest words.
        seen_b = np.empty(n_big, dtype=np.int64)
        n_seen_b = 0
        rarity = np.empty(nw, dtype=np.float64)
        n_rare = 0
        for j in range(nw):
            k = np.int64((((words[j] ^ np.uint64(0x9E3779B9)) * knuth) & mask) >> hash_shift)
            hash_sum += hash_w[k] * s0
            if has_learned:
                learned_sum += l_hash_w[k] * s0
            row = k >> skill_shift
            for c in range(n_skills):
                skill[c] += skill_hash_w[row, c] * s0
            if zipf.size:
                code = zipf[k]
                if code != _SKIP:
                    rarity[n_rare] = code / _SCALE
                    n_rare += 1
        for j in range(n_big):
            h = ((words[j] * knuth + words[j + 1]) & mask) ^ np.uint64(0x5BD1E995)
            k = np.int64(((h * knuth) & mask) >> hash_shift)
            hash_sum += hash_w[k] * s1
            if has_learned:
                learned_sum += l_hash_w[k] * s1
            row = k >> skill_shift
            for c in range(n_skills):
                skill[c] += skill_hash_w[row, c] * s1
            if seen[k]:
                seen_b[n_seen_b] = k
                n_seen_b += 1
        for j in range(n_grams):
            g = (np.uint64(raw[j]) | (np.uint64(raw[j + 1]) << np.uint64(8))
                 | (np.uint64(raw[j + 2]) << np.uint64(16))
                 | (np.uint64(raw[j + 3]) << np.uint64(24))) ^ np.uint64(0x27D4EB2F)
            k = np.int64(((g * knuth) & mask) >> hash_shift)
            hash_sum += hash_w[k] * s2
            if has_learned:
                learned_sum += l_hash_w[k] * s2
            row = k >> skill_shift
            for c in range(n_skills):
                skill[c] += skill_hash_w[row, c] * s2
        distinct = _distinct(seen_b, n_seen_b)
    else:
        distinct = 0
        rarity = np.empty(0, dtype=np.float64)
        n_rare = 0
    # raw_parts: the learned logit, the skill posterior, the offsets.
    logit = hash_sum + bias + semantic
    for j in range(dense.size):
        logit += dense_w[j] * dense[j]
    for c in range(n_skills):
        for j in range(dense.size):
            skill[c] += dense[j] * skill_dense_w[j, c]
        skill[c] += skill_bias[c]
    top = skill.max()
    total = 0.0
    for c in range(n_skills):
        skill[c] = np.exp(skill[c] - top)
        total += skill[c]
    skill /= total
    mix = np.empty(n_skills + dense.size + 1, dtype=np.float64)
    mix[:n_skills] = skill
    mix[n_skills:n_skills + dense.size] = dense
    mix[-1] = logit
    learned = logit - (_dot(mean_offset_w, mix) - mean_offset_center)
    offsets = np.empty(offset_w.shape[0], dtype=np.float64)
    for r in range(offset_w.shape[0]):
        offsets[r] = _dot(offset_w[r], mix) - offset_center[r]
    # shrunk_logit: toward the shape prior, by the closeness to the training data.
    prior = prior_b
    for j in range(len(shape)):
        prior += prior_w[j] * shape[j]
    if rarity_w.size and n_rare:
        # The rarest word, the mean of the three rarest, the share under RARE_ZIPF.
        first = second = third = -1.0
        share = 0
        for j in range(n_rare):
            z = rarity[j]
            r = min(max((_MAX_ZIPF - z) / _MAX_ZIPF, 0.0), 1.0)
            if z < _RARE_ZIPF:
                share += 1
            if r > first:
                first, second, third = r, first, second
            elif r > second:
                second, third = r, second
            elif r > third:
                third = r
        top3 = (first + second + third) / 3.0 if n_rare >= 3 else (
            (first + second) / 2.0 if n_rare == 2 else first)
        prior += rarity_w[0] * first + rarity_w[1] * top3 + rarity_w[2] * (share / n_rare)
    weight = min(1.0, distinct / seen_reference) if seen_reference > 0 else 1.0
    d = prior + learned_weight * weight * (learned - prior)
    if has_learned:
        delta = learned_sum
        for j in range(dense.size):
            delta += l_dense_w[j] * dense[j]
        own = np.empty(l_skill_w.shape[0], dtype=np.float64)
        for r in range(l_skill_w.shape[0]):
            own[r] = _dot(l_skill_w[r], skill)
        d = l_beta * d + delta
    else:
        own = np.zeros(0, dtype=np.float64)
    return d, weight, skill.max(), offsets, own
