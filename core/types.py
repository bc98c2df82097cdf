"""Value types shared by backends, policies and the app: usage and live stats."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

EWMA_ALPHA = 0.2


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False

    @classmethod
    def from_wire(cls, usage: Any) -> Usage | None:
        if not isinstance(usage, dict):
            return None
        try:
            return cls(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        except (TypeError, ValueError):
            return None


@dataclass(slots=True)
class LiveStats:
    """Smoothed latency and load of one backend, updated by every request."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    in_flight: int = 0
    requests: int = 0
    last_failure: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_s = seconds if self.ttft_s is None else (
            self.ttft_s + EWMA_ALPHA * (seconds - self.ttft_s)
        )

    def observe_tpot(self, seconds: float) -> None:
        self.tpot_s = seconds if self.tpot_s is None else (
            self.tpot_s + EWMA_ALPHA * (seconds - self.tpot_s)
        )

    def observe_failure(self) -> None:
        self.last_failure = time.monotonic()
