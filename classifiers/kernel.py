"""The complexity score of one prompt window, compiled: one call instead of ~40.

    kernel = CompiledScore.build(tables)   # built in a thread; numpy serves until it is
    if kernel is not None and kernel.ready:  # never without numba ('routegate[fast]')
        d, weight, skill_max, offsets, own = kernel.score_text(text, n_messages, flags, 0.0)

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
agree within 1e-5 on the 15,931 prompts of the shared routing data (8.8e-6 at
worst), within 1e-4 on adversarial ones (8.7e-5: 2,001 copies of one 4-byte
character, thousands of equal 4-grams in numpy's float32 sum).

numba does not check bounds, so ``build`` checks every table's shape first
(``_shape_problem``): an artifact that does not fit runs on numpy, which raises.

On an ASCII window the kernel also counts the string markers and shape features
(``features.markers``, ``prior.shape_values``: 40 ``str.count`` and four regular
expressions, a third of a cold score at 2,000 tokens); elsewhere Python counts them,
because ``\\s`` and ``\\d`` match more than ASCII there. What stays in Python: the
static embedding and the pair heads.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from classifiers import features
from classifiers.features import DENSE_NAMES
from classifiers.prior import SHAPE_NAMES, shape_values, size_shape

log = logging.getLogger("routegate.classifier")
N_DENSE = len(DENSE_NAMES)
N_SHAPE = len(SHAPE_NAMES)

@dataclass(slots=True)
class CompiledScore:
    """The kernel bound to one model's tables (``build``'s ``tables``: the arrays of
    ``ComplexityModel``, by the names below). It is built in a thread: until
    ``ready``, the model scores with numpy, so a start never waits for numba (about
    0.6 s to import it and read its cache; 5-8 s to compile on a machine's first start)."""

    args: tuple
    fn: Callable[..., Any] | None = None
    ready: bool = False
    _thread: threading.Thread | None = None

    @classmethod
    def build(cls, tables: dict[str, Any]) -> CompiledScore | None:
        """None when ``ROUTEGATE_CLASSIFIER_KERNEL=numpy`` or the tables do not fit the
        kernel; else one that becomes ``ready`` when numba has built it (never, with a
        log line saying why, when numba is missing or cannot build it)."""
        if os.environ.get("ROUTEGATE_CLASSIFIER_KERNEL", "") == "numpy":
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
        problem = _shape_problem(args)
        if problem:
            log.warning("the classifier's tables do not fit the compiled score (%s): it "
                        "scores with numpy", problem)
            return None
        kernel = cls(args)
        kernel._thread = threading.Thread(target=kernel._compile, daemon=True,
                                          name="routegate-classifier-kernel")
        kernel._thread.start()
        return kernel

    def _compile(self) -> None:
        """numba's import and the kernel's compilation (or its cache's reading), then a
        first call, off the caller's thread (llvmlite lets go of the GIL)."""
        started = time.monotonic()
        fn = _compiled()
        if fn is None:
            return
        try:
            fn(b"warm up", 7, (0.0,) * N_DENSE, (0.0,) * N_SHAPE, True, 0.0, *self.args)
        except Exception as exc:  # a damaged cache file, a full disk: not the artifact's fault
            log.warning("the compiled score could not be built (%s: %s): the classifier "
                        "scores with numpy", type(exc).__name__, str(exc)[:200])
            return
        self.fn = fn
        self.ready = True
        log.info("the classifier's compiled score is ready (%.1f s)",
                 time.monotonic() - started)

    @property
    def state(self) -> str:
        """"compiled", "building" (numpy scores meanwhile) or "numpy" (numba is missing or
        could not build it)."""
        if self.ready:
            return "compiled"
        return "building" if self._thread is not None and self._thread.is_alive() else "numpy"

    def wait(self, timeout: float = 120.0) -> bool:
        """Wait for the build (tests, benchmarks and one-off commands); ``ready``."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ready

    def score_text(self, text: str, n_messages: int, flags: tuple[bool, bool], semantic: float
                   ) -> tuple[float, float, float, np.ndarray, np.ndarray]:
        """``__call__`` of a prompt: its window lower-cased, with its markers and shape
        features (an ASCII window's string counts are the kernel's)."""
        lowered = features.bounded_window(text).lower()
        strings = lowered.isascii()     # a flag CPython keeps
        if strings:
            dense, shape = features.size_markers(text, n_messages, flags), size_shape(text)
        else:
            dense = features.markers(text, lowered, n_messages, flags)
            shape = shape_values(text, lowered)
        # bytes and tuples, not arrays: each numpy call here would cost more than its work.
        return self(lowered.encode("utf-8", "replace"), len(lowered), tuple(dense), shape,
                    strings, semantic)

    def __call__(self, raw: bytes, n_lower: int, dense: tuple[float, ...],
                 shape: tuple[float, ...], strings: bool, semantic: float
                 ) -> tuple[float, float, float, np.ndarray, np.ndarray]:
        """(d(x), closeness weight, max skill posterior, offsets, learned offsets) of a
        window's UTF-8 bytes (``n_lower``: the lower-cased window's length in characters);
        ``dense``: ``features.markers`` (the byte ratios are the kernel's), ``shape``:
        ``prior.shape_values``. ``strings``: the window is ASCII, and ``dense`` and
        ``shape`` are ``features.size_markers`` and ``prior.size_shape``: the kernel counts
        the rest itself."""
        assert self.fn is not None
        return self.fn(raw, n_lower, dense, shape, strings, semantic, *self.args)


def _shape_problem(args: tuple) -> str | None:
    """What in ``build``'s arguments would make the kernel read past an array (numba
    does not check bounds: numpy's ``take`` raises where this would read memory that is
    not the table's), or None."""
    (word_t, space_t, hash_w, dense_w, _, skill_hash_w, skill_shift, skill_dense_w,
     skill_bias, mean_offset_w, _, offset_w, offset_center, prior_w, _, rarity_w, zipf,
     seen, _, _, l_hash_w, l_dense_w, _, l_skill_w, hash_shift) = args
    n_hash = 1 << (32 - int(hash_shift))
    skills = skill_bias.size
    mix = skills + N_DENSE + 1
    checks = {
        "byte classes of 256": word_t.size == 256 and space_t.size == 256,
        "hash_w of one weight a bucket": hash_w.shape == (n_hash,),
        "dense_w": dense_w.shape == (N_DENSE,),
        "skill_hash_w's rows": skill_hash_w.ndim == 2 and skill_shift >= 0
        and skill_hash_w.shape == ((n_hash - 1 >> skill_shift) + 1, skills),
        "skill_dense_w": skill_dense_w.shape == (N_DENSE, skills),
        "mean_offset_w": mean_offset_w.shape == (mix,),
        "offset_w": offset_w.shape == (offset_center.size, mix),
        "prior_w": prior_w.shape == (N_SHAPE,),
        "the rarity table": (rarity_w.size == 0 and zipf.size == 0)
        or (rarity_w.shape == (3,) and zipf.shape == (n_hash,)),
        "seen": seen.shape == (n_hash,),
        "the learned terms": l_hash_w.size == 0 or (
            l_hash_w.shape == (n_hash,) and l_dense_w.shape == (N_DENSE,)
            and l_skill_w.ndim == 2 and l_skill_w.shape[1] == skills),
    }
    bad = [name for name, fits in checks.items() if not fits]
    return ", ".join(bad) or None


def available() -> bool:
    """Whether the compiled score can run here (numba imports)."""
    return _compiled() is not None


@lru_cache(maxsize=1)
def _compiled() -> Callable[..., Any] | None:
    """The compiled kernel (``kernel_jit.score_window``); None when numba cannot be
    imported (``pip install 'routegate[fast]'``)."""
    try:
        import numba

        from classifiers.kernel_jit import score_window
    except ImportError as exc:
        log.info("numba is not installed (%s): the classifier scores with numpy, about "
                 "twice as slow on the request path (pip install 'routegate[fast]')", exc)
        return None
    if getattr(numba.config, "DISABLE_JIT", False):   # interpreted: 100x slower than numpy
        log.info("NUMBA_DISABLE_JIT is set: the classifier scores with numpy")
        return None
    return score_window
