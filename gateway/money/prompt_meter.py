"""How an upstream counts a prompt, learned from the usage it reports.

    meter = PromptMeter(margin=0.25)
    meter.bound(ours=120, messages=3)          # the most prompt tokens billed for this prompt
    meter.observe(ours=120, messages=3, reported=131)

Our own count is tiktoken's (``o200k_base`` unless a model sets its
tokenizer) plus OpenAI's few tokens per message. A real server counts with
its own tokenizer and wraps every message in its chat template (llama.cpp's
Gemma template adds about five tokens a message), so its ``prompt_tokens``
differ from ours, often upward. The reservation must hold what the server
will bill, and billing must never pass what was reserved, so this meter
fits, per model, upstream ≈ a·ours + b·messages by least squares over the
recent answers (exponentially weighted, so a changed upstream is learned
anew) and bounds a prompt at (a·ours + b·messages)·(1 + margin) + slack.

A hostile upstream cannot talk the bound up without limit: the fit is
clamped (a in [0.25, 4], b in [0, 64]) and an answer that reports more than
four times the current bound teaches nothing (it is an anomaly: billed at the
bound, logged and counted). Before ``MIN_SAMPLES`` answers the bound is the
cold one: 1.5·ours + 8 per message, plus the slack.
"""

from __future__ import annotations

import math

MIN_SAMPLES = 8
DECAY = 0.98              # weight of the past per new answer: about the last 50 count
SLACK = 16                # tokens on top of every bound
COLD_RATIO, COLD_PER_MESSAGE = 1.5, 8.0
RATIO_RANGE = (0.25, 4.0)
PER_MESSAGE_RANGE = (0.0, 64.0)
UNTEACHABLE = 4.0         # a report above this many bounds is not learned from


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


class PromptMeter:
    """One model's learned prompt count (a few float operations per answer)."""

    __slots__ = ("margin", "samples", "_xx", "_xm", "_mm", "_xy", "_my", "ratio", "per_message")

    def __init__(self, margin: float = 0.25) -> None:
        self.margin = margin
        self.samples = 0
        # Weighted sums of x=ours, m=messages, y=reported for the normal equations.
        self._xx = self._xm = self._mm = self._xy = self._my = 0.0
        self.ratio, self.per_message = COLD_RATIO, COLD_PER_MESSAGE

    @property
    def learned(self) -> bool:
        return self.samples >= MIN_SAMPLES

    def bound(self, ours: int, messages: int) -> int:
        """The most prompt tokens this model may bill for a prompt we count as ``ours``."""
        expected = self.ratio * ours + self.per_message * messages
        if self.learned:
            expected *= 1 + self.margin
        return max(ours, math.ceil(expected)) + SLACK

    def observe(self, ours: int, messages: int, reported: int) -> None:
        """Learn from one answer's reported ``prompt_tokens`` (already checked non-negative)."""
        if ours <= 0 or reported > UNTEACHABLE * self.bound(ours, messages):
            return
        x, m, y = float(ours), float(messages), float(reported)
        d = DECAY
        self._xx = d * self._xx + x * x
        self._xm = d * self._xm + x * m
        self._mm = d * self._mm + m * m
        self._xy = d * self._xy + x * y
        self._my = d * self._my + m * y
        self.samples += 1
        if self.learned:
            self._fit()

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
