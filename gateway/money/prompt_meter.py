"""How an upstream counts a prompt, learned from the usage it reports.

    meter = PromptMeter(margin=0.25)
    meter.bound(ours=120, messages=3)          # the prompt tokens to reserve for this prompt
    meter.observe(ours=120, messages=3, reported=131)

Our own count is tiktoken's (``o200k_base`` unless a model sets its
tokenizer) plus OpenAI's few tokens per message. A real server counts with
its own tokenizer and wraps every message in its chat template, so its
``prompt_tokens`` differ from ours: measured against llama.cpp's Gemma 3,
within 5% on English prose, +15% on code, and twice ours on a prompt of
digits (Gemma splits numbers into single digits). The reservation should
hold what the server will bill, so this meter learns, per model and team:

- a fit, upstream ≈ a·ours + b·messages, by least squares over the recent
  answers (exponentially weighted, so a changed upstream is learned anew);
- the spread around it: the largest reported ÷ fitted over the last
  ``WINDOW`` answers, so traffic that sometimes counts twice ours keeps a
  bound wide enough for it.

The bound is (a·ours + b·messages)·max(1 + margin, spread) + slack. Once
``SETTLED`` answers were learned from, one in ``SAMPLE_EVERY`` still is, and
every answer wider than the spread: learning runs on every request, so it is
kept to a few float operations on most of them. Before
``MIN_SAMPLES`` answers it is the cold one, 2·ours + 8 per message + slack,
which covered every prompt measured above.

The bound sizes a reservation; it never caps a bill (``ceiling.py`` bills
what the upstream reports, up to the model's context window, which is also
the most a report can teach here). Each (model, team) has its own meter, so
one team's prompts never move what another's are reserved at. A hostile
upstream can talk a bound up only within the clamps (a in [0.25, 4], b in
[0, 64], spread at most 4), and only for the teams it serves.
"""

from __future__ import annotations

import math
from collections import deque

MIN_SAMPLES = 8
DECAY = 0.98              # weight of the past per new answer: about the last 50 count
SLACK = 16                # tokens on top of every bound
COLD_RATIO, COLD_PER_MESSAGE = 2.0, 8.0
WINDOW = 64               # answers the spread looks back over
REFIT_EVERY = 32          # answers between two fits (each looks back over the window)
SETTLED, SAMPLE_EVERY = 256, 4   # past SETTLED answers, learn from one in SAMPLE_EVERY
MAX_SPREAD = 4.0
RATIO_RANGE = (0.25, 4.0)
PER_MESSAGE_RANGE = (0.0, 64.0)


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


class PromptMeter:
    """One model's learned prompt count (a few float operations per answer)."""

    __slots__ = ("margin", "samples", "_xx", "_xm", "_mm", "_xy", "_my", "ratio", "per_message",
                 "spread", "_recent", "_widen", "_seen")

    def __init__(self, margin: float = 0.25) -> None:
        self.margin = margin
        self.samples = 0
        # Weighted sums of x=ours, m=messages, y=reported for the normal equations.
        self._xx = self._xm = self._mm = self._xy = self._my = 0.0
        self.ratio, self.per_message = COLD_RATIO, COLD_PER_MESSAGE
        self.spread = 1.0
        self._widen = 1 + margin
        self._seen = 0
        self._recent: deque[tuple[float, float, float]] = deque(maxlen=WINDOW)

    @property
    def learned(self) -> bool:
        return self.samples >= MIN_SAMPLES

    def bound(self, ours: int, messages: int) -> int:
        """The most prompt tokens this model may bill for a prompt we count as ``ours``."""
        expected = self.ratio * ours + self.per_message * messages
        if self.samples >= MIN_SAMPLES:
            expected *= self._widen
        return max(ours, math.ceil(expected)) + SLACK

    def observe(self, ours: int, messages: int, reported: int) -> None:
        """Learn from one answer's reported ``prompt_tokens`` (already checked non-negative)."""
        if ours <= 0:
            return
        fitted = self.ratio * ours + self.per_message * messages
        if self.samples >= SETTLED:
            # A settled fit learns from one answer in SAMPLE_EVERY, and from every one
            # wider than its spread: the bound stays honest at a quarter of the cost.
            self._seen += 1
            if self._seen % SAMPLE_EVERY and reported <= fitted * self.spread:
                return
        x, m, y = float(ours), float(messages), float(reported)
        d = DECAY
        self._xx = d * self._xx + x * x
        self._xm = d * self._xm + x * m
        self._mm = d * self._mm + m * m
        self._xy = d * self._xy + x * y
        self._my = d * self._my + m * y
        self.samples += 1
        self._recent.append((x, m, y))
        if self.samples < MIN_SAMPLES:
            return
        if self.samples % REFIT_EVERY == 0 or self.samples == MIN_SAMPLES:
            self._fit()    # amortised over REFIT_EVERY answers
            a, b = self.ratio, self.per_message
            widest = 1.0
            for x, m, y in self._recent:     # a loop, not a generator: it runs every 32
                widest = max(widest, y / (a * x + b * m))
            self.spread = min(MAX_SPREAD, widest)
        else:   # a wider answer than the spread so far widens it at once
            wide = y / (self.ratio * x + self.per_message * m)
            if wide > self.spread:
                self.spread = min(MAX_SPREAD, wide)
        self._widen = max(1 + self.margin, self.spread)

    def _fit(self) -> None:
        det = self._xx * self._mm - self._xm * self._xm
        if det > 1e-9 * self._xx * self._mm:
            ratio = (self._xy * self._mm - self._my * self._xm) / det
            per_message = (self._my * self._xx - self._xy * self._xm) / det
        else:   # every prompt the same shape: the ratio alone explains it
            ratio, per_message = self._xy / self._xx, 0.0
        if per_message < 0:   # the template cannot remove tokens: refit through the origin
            ratio, per_message = self._xy / self._xx, 0.0
        self.ratio = _clamp(ratio, RATIO_RANGE)
        self.per_message = _clamp(per_message, PER_MESSAGE_RANGE)
