"""The compiled score's string counts (``classifiers/kernel_jit.py``): what
``features.markers`` and ``prior.shape_values`` count with ``str.count`` and four
regular expressions, read off an ASCII window's bytes in a few passes.

ASCII only: there ``\\s`` is what ``_space`` says (``\\x1c``-``\\x1f`` too), ``\\d`` is
0-9 and a byte is a character; elsewhere Python counts them.
``tests/classifiers/test_kernel.py`` holds each count to Python's.
"""

# Compiled code: numba types it from its arguments; mypy does not read it.
# mypy: ignore-errors

from __future__ import annotations

import numpy as np

from classifiers import features, prior
from classifiers.features import (
    ANSWER_MARKERS,
    CODE_FENCE,
    CODE_KEYWORDS,
    LATEX,
    LOG_LINES,
    MC_OPTIONS,
    QUESTION_MARKS,
)
from classifiers.jit import jit as _jit

# The needles ``features.markers`` and ``prior.shape_values`` count with ``str.count``,
# by group: code words, request stems, "answer:", the code fence. ``_BY_FIRST`` lists
# the needles by their first byte (``_FIRST_START[b]:_FIRST_START[b + 1]``).
_GROUPS = (features._CODE_WORDS, prior._REQUEST_STEMS, ("answer:",), ("```",))
_NEEDLES = [(w.encode("ascii"), g) for g, words in enumerate(_GROUPS) for w in words]
_NEEDLE_BYTES = np.frombuffer(b"".join(w for w, _ in _NEEDLES), dtype=np.uint8).copy()
_NEEDLE_START = np.cumsum([0] + [len(w) for w, _ in _NEEDLES]).astype(np.int64)
_NEEDLE_GROUP = np.array([g for _, g in _NEEDLES], dtype=np.int64)
_BY_FIRST = np.array(sorted(range(len(_NEEDLES)), key=lambda k: _NEEDLES[k][0][0]),
                     dtype=np.int64)
_FIRST_START = np.searchsorted(np.array([_NEEDLES[k][0][0] for k in _BY_FIRST]),
                               np.arange(257)).astype(np.int64)
_N_GROUPS = len(_GROUPS)
# prior.SHAPE_NAMES' places.
(_S_NUMBERS, _S_OPERATORS, _S_QUESTIONS, _S_SENTENCES, _S_REQUESTS, _S_FENCE,
 _S_LINES) = (prior.SHAPE_NAMES.index(name) for name in (
    "log_numbers", "log_operators", "questions", "log_sentences", "log_requests",
    "code_fence", "log_lines"))


@_jit
def _space(b):
    """Whether an ASCII byte is ``\\s`` in a ``str`` pattern (\\x1c-\\x1f are)."""
    return b == 32 or 9 <= b <= 13 or 28 <= b <= 31


@_jit
def _needle_counts(raw):
    """Each group's ``sum(map(window.count, needles))``: non-overlapping occurrences of
    each needle, as ``str.count``, in one pass over the bytes."""
    counts = np.zeros(_N_GROUPS, dtype=np.int64)
    next_free = np.zeros(_NEEDLE_GROUP.size, dtype=np.int64)
    n = len(raw)
    for i in range(n):
        b = raw[i]
        for t in range(_FIRST_START[b], _FIRST_START[b + 1]):
            k = _BY_FIRST[t]
            start = _NEEDLE_START[k]
            size = _NEEDLE_START[k + 1] - start
            if i < next_free[k] or i + size > n:
                continue
            j = 1
            while j < size and raw[i + j] == _NEEDLE_BYTES[start + j]:
                j += 1
            if j == size:
                counts[_NEEDLE_GROUP[k]] += 1
                next_free[k] = i + size
    return counts


@_jit
def _latex(raw):
    """``len(features._LATEX_RE.findall(window))``: ``\\[a-z]+|\\$[^$\\n]{1,80}\\$``."""
    n = len(raw)
    count = i = 0
    while i < n:
        b = raw[i]
        if b == 92 and i + 1 < n and 97 <= raw[i + 1] <= 122:     # a backslash, then a-z
            i += 2
            while i < n and 97 <= raw[i] <= 122:
                i += 1
            count += 1
            continue
        if b == 36:                                          # $: the next $ or newline
            j = i + 1
            while j < n and j <= i + 81 and raw[j] != 36 and raw[j] != 10:
                j += 1
            if i + 2 <= j <= i + 81 and j < n and raw[j] == 36:
                count += 1
                i = j + 1
                continue
        i += 1
    return count


@_jit
def _options(raw):
    """``len(features._OPTION_RE.findall(window))``:
    ``(?m)^\\s*\\(?[a-h][\\).:]\\s|\\([a-h]\\)\\s``."""
    n = len(raw)
    count = i = 0
    while i < n:
        end = -1
        if i == 0 or raw[i - 1] == 10:                       # a line's start
            j = i
            while j < n and _space(raw[j]):
                j += 1
            if j < n and raw[j] == 40:                       # (
                j += 1
            if (j + 2 < n and 97 <= raw[j] <= 104 and _space(raw[j + 2])
                    and (raw[j + 1] == 41 or raw[j + 1] == 46 or raw[j + 1] == 58)):
                end = j + 3
        if (end < 0 and i + 3 < n and raw[i] == 40 and 97 <= raw[i + 1] <= 104
                and raw[i + 2] == 41 and _space(raw[i + 3])):
            end = i + 4
        if end < 0:
            i += 1
        else:
            count += 1
            i = end
    return count


@_jit
def _numbers(raw):
    """``len(prior._NUMBER_RE.findall(window))``: ``\\d+(?:[.,]\\d+)?``."""
    n = len(raw)
    count = i = 0
    while i < n:
        if 48 <= raw[i] <= 57:
            while i < n and 48 <= raw[i] <= 57:
                i += 1
            if i + 1 < n and (raw[i] == 46 or raw[i] == 44) and 48 <= raw[i + 1] <= 57:
                i += 1
                while i < n and 48 <= raw[i] <= 57:
                    i += 1
            count += 1
        else:
            i += 1
    return count


@_jit
def strings(raw, dense, shape):
    """``features.markers``' and ``prior.shape_values``' counts of an ASCII window, into
    ``dense`` (rounded as float32, as ``dense_features``) and ``shape``. ASCII only: there
    ``\\s`` and ``\\d`` are what ``_space`` and 0-9 say, and a byte is a character."""
    n = len(raw)
    lines = questions = operators = sentences = 0
    for i in range(n):
        b = raw[i]
        if b == 10:
            lines += 1
        elif b == 63:
            questions += 1
        elif b == 61 or b == 43 or b == 42 or b == 47 or b == 94 or b == 60 or b == 62:
            operators += 1      # = + * / ^ < >
        if (b == 46 or b == 33 or b == 63) and (i + 1 == n or _space(raw[i + 1])):
            sentences += 1      # prior._SENTENCE_RE
    needles = _needle_counts(raw)
    fence = 1.0 if needles[3] else 0.0
    dense[CODE_FENCE] = np.float32(fence)
    dense[CODE_KEYWORDS] = np.float32(min(needles[0], 10) / 10.0)
    dense[LATEX] = np.float32(min(_latex(raw), 10) / 10.0)
    dense[MC_OPTIONS] = np.float32(min(_options(raw), 8) / 8.0)
    dense[LOG_LINES] = np.float32(np.log1p(lines) / 5.0)
    dense[QUESTION_MARKS] = np.float32(min(questions, 10) / 10.0)
    dense[ANSWER_MARKERS] = np.float32(min(needles[2], 10) / 10.0)
    shape[_S_NUMBERS] = np.log1p(_numbers(raw)) / 4.0
    shape[_S_OPERATORS] = np.log1p(operators) / 4.0
    shape[_S_QUESTIONS] = min(questions, 10) / 10.0
    shape[_S_SENTENCES] = np.log1p(sentences) / 4.0
    shape[_S_REQUESTS] = np.log1p(needles[1]) / 2.0
    shape[_S_FENCE] = fence
    shape[_S_LINES] = np.log1p(lines) / 5.0
