"""The complexity score of one prompt window, compiled: one call instead of ~40.

    kernel = CompiledScore.build(tables)   # None without numba ('routegate[fast]')
    d, weight, skill_max, offsets, own = kernel(raw, len(lowered), markers, shape, 0.0)

Why it exists (measured, ``python -m loadtest.bench_classifier --gap-ms 20``): on the
request path a score runs after other work, not back to back, and each numpy
call then costs 30-45 us before it does anything: its dispatch code is out of
the CPU's caches (``a + 1`` on 100 numbers: 1 us back to back, 46 us after 20 ms
asleep). The numpy score makes about 40 such calls. This module runs the same
arithmetic, the featurizer's n-gram hashing included, in one function that
numba compiles (``kernel_jit.py``): one dispatch and a few pages of code. At 500
tokens, 20 ms apart, p50 / p99 went from 1,106 / 1,393 us to 715 / 949.

The numpy path (``features.featurize``, ``ComplexityModel.score_features``) stays
the reference: training uses it, it serves where numba is not installed (the
image: llvmlite alone is 173 MB) or ``ROUTEGATE_CLASSIFIER_KERNEL=numpy``, and
``tests/classifiers/test_kernel.py`` holds the two to the same score. Sums run
in float64 here where numpy's float32 dot products round to float32: the two
agree to about 1e-5.

What stays in Python: the string markers (regexes and ``str.count``: CPython's
own code, warm on any request path), the static embedding and the pair heads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

log = logging.getLogger("routegate.classifier")

@dataclass(frozen=True, slots=True)
class CompiledScore:
    """The kernel bound to one model's tables (``build``'s ``tables``: the arrays of
    ``ComplexityModel``, by the names below)."""

    fn: Callable[..., Any]
    args: tuple

    @classmethod
    def build(cls, tables: dict[str, Any]) -> CompiledScore | None:
        """None when numba is missing or ``ROUTEGATE_CLASSIFIER_KERNEL=numpy``."""
        if os.environ.get("ROUTEGATE_CLASSIFIER_KERNEL", "") == "numpy":
            return None
        fn = _compiled()
        if fn is None:
            return None
        f32 = np.float32
        f64 = np.float64
        empty = np.zeros(0, dtype=f64)
        learned = tables.get("learned")
        args = (
            tables["word_t"], tables["space_t"],
            np.ascontiguousarray(tables["hash_w"], dtype=f32),
            np.ascontiguousarray(tables["dense_w"], dtype=f64), float(tables["bias"]),
            np.ascontiguousarray(tables["skill_hash_w"], dtype=f32), int(tables["skill_shift"]),
            np.ascontiguousarray(tables["skill_dense_w"], dtype=f64),
            np.ascontiguousarray(tables["skill_bias"], dtype=f64),
            np.ascontiguousarray(tables["mean_offset_w"], dtype=f64),
            float(tables["mean_offset_center"]),
            np.ascontiguousarray(tables["offset_w"], dtype=f64),
            np.ascontiguousarray(tables["offset_center"], dtype=f64),
            np.ascontiguousarray(tables["prior_w"], dtype=f64), float(tables["prior_b"]),
            empty if tables["rarity"] is None else np.ascontiguousarray(tables["rarity"][0], f64),
            (np.zeros(0, dtype=np.uint8) if tables["rarity"] is None
             else np.ascontiguousarray(tables["rarity"][1], dtype=np.uint8)),
            np.ascontiguousarray(tables["seen"], dtype=np.bool_),
            float(tables["seen_reference"]), float(tables["learned_weight"]),
            empty.astype(f32) if learned is None else np.ascontiguousarray(learned.hash_w, f32),
            empty if learned is None else np.ascontiguousarray(learned.dense_w, f64),
            1.0 if learned is None else float(learned.beta),
            (np.zeros((0, tables["skill_bias"].size), dtype=f64) if learned is None
             else np.ascontiguousarray(learned.skill_w, f64)),
            np.uint64(tables["hash_shift"]),
        )
        kernel = cls(fn, args)
        # Compiled (or read from numba's cache) now, not on the first request.
        kernel(np.frombuffer(b"warm up", dtype=np.uint8), 7, np.zeros(len(tables["dense_w"])),
               np.zeros(len(tables["prior_w"])), 0.0)
        return kernel

    def __call__(self, raw: np.ndarray, n_lower: int, dense: np.ndarray, shape: np.ndarray,
                 semantic: float) -> tuple[float, float, float, np.ndarray, np.ndarray]:
        """(d(x), closeness weight, max skill posterior, offsets, learned offsets) of a
        window's bytes (``n_lower``: the lower-cased window's length in characters);
        ``dense``: the markers, the byte ratios (DIGIT_RATIO...) left to the kernel."""
        return self.fn(raw, n_lower, dense, shape, semantic, *self.args)


def available() -> bool:
    """Whether the compiled score can run here (numba imports)."""
    return _compiled() is not None


@lru_cache(maxsize=1)
def _compiled() -> Callable[..., Any] | None:
    """The compiled kernel (``kernel_jit.score_window``); None when numba cannot be
    imported (``pip install 'routegate[fast]'``)."""
    try:
        from classifiers.kernel_jit import score_window
    except ImportError as exc:
        log.info("numba is not installed (%s): the classifier scores with numpy, about "
                 "twice as slow on the request path (pip install 'routegate[fast]')", exc)
        return None
    return score_window
