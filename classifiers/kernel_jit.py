"""The compiled half of ``classifiers/kernel.py``: imported only when numba is there.

Each function is compiled by numba on its first call, cached on disk where a
directory for it can be written (the source tree's ``__pycache__``, else
``NUMBA_CACHE_DIR`` or the user's cache), else compiled in memory at each start.
"""

# Compiled code: numba types it from its arguments; mypy does not read it.
# mypy: ignore-errors

from __future__ import annotations

import numpy as np

from classifiers.features import CJK_RATIO, DIGIT_RATIO, NON_ASCII_RATIO, OPERATOR_RATIO
from classifiers.jit import jit as _jit
from classifiers.kernel_strings import strings as _strings
from classifiers.rarity import MAX_ZIPF as _MAX_ZIPF
from classifiers.rarity import RARE_ZIPF as _RARE_ZIPF
from classifiers.rarity import SCALE as _SCALE
from classifiers.rarity import SKIP as _SKIP


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


_MASK = np.uint64(0xFFFFFFFF)
_KNUTH = np.uint64(2654435761)
_POLY = np.uint64(0x100000001B3)


@_jit
def _tokens(raw, word_t, space_t):
    """``features.token_hashes``: each word's polynomial hash of its bytes, and each
    other byte that is not a space alone; (hashes, how many)."""
    n = len(raw)
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
                p *= _POLY
                i += 1
            words[nw] = h & _MASK
            nw += 1
        else:
            if not space_t[b]:
                words[nw] = np.uint64(b)
                nw += 1
            i += 1
    return words, nw


@_jit
def _dense(raw, n_lower, markers):
    """``features.dense_features``: the markers as float32 rounds them, and the
    ratios of digits, operators, non-ASCII and CJK characters read off the bytes."""
    dense = np.empty(len(markers), dtype=np.float64)
    for j in range(len(markers)):
        dense[j] = np.float32(markers[j])
    digits = operators = non_ascii = cjk = 0
    for j in range(len(raw)):
        b = raw[j]
        if 48 <= b <= 57:
            digits += 1
        elif b == 61 or b == 43 or b == 42 or b == 47 or b == 94 or b == 60 or b == 62:
            operators += 1      # = + * / ^ < >
        elif b >= 0xC0:         # a UTF-8 lead byte: one character
            non_ascii += 1
            if 0xE3 <= b <= 0xED:
                cjk += 1
    chars = max(n_lower, 1)
    dense[DIGIT_RATIO] = np.float32(digits / chars)
    dense[OPERATOR_RATIO] = np.float32(operators / chars)
    dense[NON_ASCII_RATIO] = np.float32(non_ascii / chars)
    dense[CJK_RATIO] = np.float32(cjk / chars)
    return dense


@_jit
def _buckets(raw, words, nw, hash_shift):
    """``featurize``'s indices: the buckets of the word unigrams, then of the bigrams,
    then of the byte 4-grams (none below 4 bytes); and the three blocks' sizes."""
    n = len(raw)
    if n < 4:
        return np.empty(0, dtype=np.int64), 0, 0, 0
    n_big = nw - 1 if nw > 1 else 0
    out = np.empty(nw + n_big + n - 3, dtype=np.int64)
    for j in range(nw):
        out[j] = (((words[j] ^ np.uint64(0x9E3779B9)) * _KNUTH) & _MASK) >> hash_shift
    for j in range(n_big):
        h = ((words[j] * _KNUTH + words[j + 1]) & _MASK) ^ np.uint64(0x5BD1E995)
        out[nw + j] = ((h * _KNUTH) & _MASK) >> hash_shift
    for j in range(n - 3):
        g = (np.uint64(raw[j]) | (np.uint64(raw[j + 1]) << np.uint64(8))
             | (np.uint64(raw[j + 2]) << np.uint64(16))
             | (np.uint64(raw[j + 3]) << np.uint64(24))) ^ np.uint64(0x27D4EB2F)
        out[nw + n_big + j] = ((g * _KNUTH) & _MASK) >> hash_shift
    return out, nw, n_big, n - 3


@_jit
def _sums(buckets, blocks, hash_w, l_hash_w, skill_hash_w, skill_shift, skill):
    """The hashed weights of ``buckets`` (shipped, learned) and their skill rows into
    ``skill``, each n-gram scaled by 1/sqrt(its block's size), as ``featurize``'s values."""
    shipped = 0.0
    learned = 0.0
    start = 0
    for size in blocks:
        scale = np.float32(1.0 / np.sqrt(size)) if size else np.float32(0.0)
        for j in range(start, start + size):
            k = buckets[j]
            shipped += hash_w[k] * scale
            if l_hash_w.size:
                learned += l_hash_w[k] * scale
            row = k >> skill_shift
            for c in range(skill.size):
                skill[c] += skill_hash_w[row, c] * scale
        start += size
    return shipped, learned


@_jit
def _evidence(buckets, nw, n_big, zipf, seen):
    """(distinct bigram buckets the training data has seen, the Zipf values of the
    words the rarity table knows, how many of them)."""
    rarity = np.empty(nw, dtype=np.float64)
    n_rare = 0
    for j in range(nw):
        if zipf.size and zipf[buckets[j]] != _SKIP:
            rarity[n_rare] = zipf[buckets[j]] / _SCALE
            n_rare += 1
    seen_b = np.empty(n_big, dtype=np.int64)
    n_seen = 0
    for j in range(nw, nw + n_big):
        if seen[buckets[j]]:
            seen_b[n_seen] = buckets[j]
            n_seen += 1
    return _distinct(seen_b, n_seen), rarity, n_rare


@_jit
def _rarity(zipf_values, n, rarity_w):
    """``rarity_features`` dotted with ``rarity_w``: the rarest word, the mean of the
    three rarest, the share under RARE_ZIPF (0 without words)."""
    if rarity_w.size == 0 or n == 0:
        return 0.0
    first = second = third = -1.0
    share = 0
    for j in range(n):
        z = zipf_values[j]
        r = min(max((_MAX_ZIPF - z) / _MAX_ZIPF, 0.0), 1.0)
        if z < _RARE_ZIPF:
            share += 1
        if r > first:
            first, second, third = r, first, second
        elif r > second:
            second, third = r, second
        elif r > third:
            third = r
    top3 = (first + second + third) / 3.0 if n >= 3 else (
        (first + second) / 2.0 if n == 2 else first)
    return rarity_w[0] * first + rarity_w[1] * top3 + rarity_w[2] * (share / n)


@_jit
def _posterior(skill, dense, skill_dense_w, skill_bias):
    """The skill posterior, in place: the n-grams' sums plus the dense terms, softmax."""
    for c in range(skill.size):
        for j in range(dense.size):
            skill[c] += dense[j] * skill_dense_w[j, c]
        skill[c] += skill_bias[c]
    top = skill.max()
    total = 0.0
    for c in range(skill.size):
        skill[c] = np.exp(skill[c] - top)
        total += skill[c]
    skill /= total


@_jit
def score_window(raw, n_lower, markers, shape, strings, semantic, word_t, space_t, hash_w,
                 dense_w, bias, skill_hash_w, skill_shift, skill_dense_w, skill_bias,
                 mean_offset_w, mean_offset_center, offset_w, offset_center, prior_w, prior_b, rarity_w,
                 zipf, seen, seen_reference, learned_weight, l_hash_w, l_dense_w, l_beta,
                 l_skill_w, hash_shift):
    """``ComplexityModel.score_features(featurize(window))`` of a window's UTF-8 bytes:
    (d(x), closeness weight, the skill posterior's maximum, offsets by key, the learned
    terms' offsets by name). ``strings``: the window is ASCII, and the string markers
    and shape features (0.0 in ``markers`` and ``shape``) are counted here."""
    words, nw = _tokens(raw, word_t, space_t)
    dense = _dense(raw, n_lower, markers)
    shape_a = np.empty(len(shape), dtype=np.float64)
    for j in range(len(shape)):
        shape_a[j] = shape[j]
    if strings:
        _strings(raw, dense, shape_a)
    buckets, nw, n_big, n_grams = _buckets(raw, words, nw, hash_shift)
    skill = np.zeros(skill_bias.size, dtype=np.float64)
    shipped, learned_sum = _sums(buckets, (nw, n_big, n_grams), hash_w, l_hash_w,
                                 skill_hash_w, skill_shift, skill)
    distinct, zipf_values, n_rare = _evidence(buckets, nw, n_big, zipf, seen)
    # raw_parts: the learned logit, the skill posterior, the offsets.
    logit = shipped + bias + semantic + _dot(dense_w, dense)
    _posterior(skill, dense, skill_dense_w, skill_bias)
    mix = np.concatenate((skill, dense, np.array([logit])))
    learned = logit - (_dot(mean_offset_w, mix) - mean_offset_center)
    offsets = np.empty(offset_w.shape[0], dtype=np.float64)
    for r in range(offset_w.shape[0]):
        offsets[r] = _dot(offset_w[r], mix) - offset_center[r]
    # shrunk_logit: toward the shape prior, by the closeness to the training data.
    prior = prior_b + _rarity(zipf_values, n_rare, rarity_w)
    prior += _dot(prior_w, shape_a)
    weight = min(1.0, distinct / seen_reference) if seen_reference > 0 else 1.0
    d = prior + learned_weight * weight * (learned - prior)
    own = np.zeros(l_skill_w.shape[0], dtype=np.float64)
    if l_hash_w.size:   # routegate learn's terms: beta * d(x) + delta(x), offsets by skill
        for r in range(l_skill_w.shape[0]):
            own[r] = _dot(l_skill_w[r], skill)
        d = l_beta * d + learned_sum + _dot(l_dense_w, dense)
    return d, weight, skill.max(), offsets, own
