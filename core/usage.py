"""What an upstream says a request used, read within bounds: ``Usage`` and its readers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The largest token count read from an upstream: beyond it a figure saturates
# (2**53: exact as a float, far past any real answer, and far inside 64 bits,
# so no sum, log line or Redis write can overflow on it). Billing then clamps
# it to the request's ceiling (gateway/money/ceiling.py).
MAX_REPORTED_TOKENS = 2**53


# Why an upstream's figures were not billed as they came (gateway/money/ceiling.py).
NEGATIVE, OVER_CAP, UNREADABLE = "negative", "over_cap", "unreadable"
# A translating backend's chat ``usage`` for usage it could not read: from_wire refuses it.
UNREADABLE_USAGE = {"prompt_tokens": UNREADABLE, "completion_tokens": UNREADABLE}


def _count(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a token count: {value!r}")
    if isinstance(value, float) and not value.is_integer():   # also NaN and the infinities
        raise ValueError(f"not a token count: {value!r}")
    return max(-MAX_REPORTED_TOKENS, min(int(value), MAX_REPORTED_TOKENS))


def cache_count(value: Any, room: int) -> tuple[int, str | None]:
    """A prompt-cache figure (read from the cache, or written to it), as every backend
    reads it, with ``room`` prompt tokens left for it: (the count, why it was not read
    as sent). Missing is 0; not an integer (a string, a bool, 800.5, JSON's 1e30: a float
    past 2**53 is no exact count), 0 (UNREADABLE), though a whole float within that is
    read as its integer (800.0, as the prompt's own figure is); negative, 0 (NEGATIVE);
    past ``room``, ``room`` (OVER_CAP)."""
    if type(value) is int and 0 <= value <= room:      # the usual case, at once
        return value, None
    if value is None:
        return 0, None
    if type(value) is float and value.is_integer() and abs(value) <= MAX_REPORTED_TOKENS:
        value = int(value)
    if type(value) is not int:
        return 0, UNREADABLE
    if 0 <= value <= room:
        return value, None
    return (0, NEGATIVE) if value < 0 else (room, OVER_CAP)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    # Of the prompt tokens: read from the provider's prompt cache, and written to it
    # (Anthropic's cache_creation; billed at the model's cache prices).
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    # Why a cache figure was not read as sent (``cache_count``): billing flags the answer.
    cache_anomaly: str | None = None
    # Of cache_write_tokens, those kept an hour (Anthropic's ttl "1h", priced apart).
    cache_write_1h_tokens: int = 0

    @classmethod
    def from_wire(cls, usage: Any) -> Usage | None:
        """An upstream's ``usage`` object, saturated to ``MAX_REPORTED_TOKENS``;
        None when it is missing or not numbers (billing then counts for itself).
        ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM, SGLang, llama.cpp) and
        ``.cache_write_tokens`` (every translating backend's spelling) are read by
        ``cache_count``, within the prompt: a figure that is not a count, negative, or
        past the prompt is corrected and named in ``cache_anomaly``."""
        if not isinstance(usage, dict):
            return None
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if (type(prompt) is int and type(completion) is int     # the usual case, at once
                and 0 <= prompt <= MAX_REPORTED_TOKENS and 0 <= completion <= MAX_REPORTED_TOKENS):
            out = cls(prompt, completion)
        else:
            try:
                out = cls(_count(prompt), _count(completion))
            except ValueError:
                return None
        details = usage.get("prompt_tokens_details")
        if details is not None:
            out._read_details(details)
        return out

    def _read_details(self, details: Any) -> None:
        if not isinstance(details, dict):
            self.cache_anomaly = UNREADABLE
            return
        room = max(self.prompt_tokens, 0)
        self.cached_tokens, anomaly = cache_count(details.get("cached_tokens"), room)
        # Written to the cache: the rest of the prompt at most. Looked up only when present.
        if "cache_write_tokens" in details:
            self.cache_write_tokens, wrong = cache_count(details["cache_write_tokens"],
                                                         room - self.cached_tokens)
            anomaly = anomaly or wrong
            if "cache_write_1h_tokens" in details:
                self.cache_write_1h_tokens, wrong = cache_count(
                    details["cache_write_1h_tokens"], self.cache_write_tokens)
                anomaly = anomaly or wrong
        self.cache_anomaly = anomaly

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens read at the full input price."""
        return max(0, self.prompt_tokens - self.cached_tokens - self.cache_write_tokens)
