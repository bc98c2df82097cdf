"""A circuit breaker per model: stop sending to an upstream that keeps failing.

    breaker = Breaker(config.breaker)
    if breaker.allow(): ... call ...; breaker.record(ok=True)
    breaker.rest_until(time.monotonic() + retry_after)   # an upstream 429's Retry-After

closed --(N failures in a row, or error rate over the window)--> open
open --(cooldown passed)--> half_open: one probe request goes through
half_open --probe ok--> closed;  --probe failed--> open again

An open breaker (or a model resting after a 429) takes the model out of
routing's candidates and is skipped by the attempt loop. Its state is in
``/metrics`` (``routegate_breaker_state``) and ``/readyz``.
"""

from __future__ import annotations

import time
from collections import deque

from core.escalation_config import BreakerConfig

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATE_CODE = {CLOSED: 0, OPEN: 1, HALF_OPEN: 2}


class Breaker:
    def __init__(self, config: BreakerConfig) -> None:
        self.config = config
        self.state = CLOSED
        self._consecutive = 0
        # Outcomes per whole second, [second, requests, failures]: O(1) a request and
        # one small list a second (a tuple per request piled up 100k objects for the GC).
        self._window: deque[list[int]] = deque()
        self._opened_at = 0.0
        self._probing = False
        self._resting_until = 0.0

    def available(self, now: float | None = None) -> bool:
        """Whether routing may pick this model now (no side effect)."""
        now = time.monotonic() if now is None else now
        if now < self._resting_until:
            return False
        if self.state == OPEN:
            return now - self._opened_at >= self.config.cooldown_s
        return not (self.state == HALF_OPEN and self._probing)

    def allow(self, now: float | None = None) -> bool:
        """Whether a request may go now; in half-open, only the one probe."""
        now = time.monotonic() if now is None else now
        if not self.config.enabled:
            return now >= self._resting_until
        if not self.available(now):
            return False
        if self.state == OPEN:
            self.state = HALF_OPEN
        if self.state == HALF_OPEN:
            self._probing = True
        return True

    def rest_until(self, until: float) -> None:
        """Skip this model until ``until`` (monotonic): the upstream asked us to."""
        self._resting_until = max(self._resting_until, until)

    def record(self, ok: bool, now: float | None = None) -> None:
        if not self.config.enabled:
            return
        now = time.monotonic() if now is None else now
        if self.state == HALF_OPEN and self._probing:
            self._probing = False
            self._close() if ok else self._open(now)
            return
        second = int(now)
        window = self._window
        if not window or window[-1][0] != second:
            window.append([second, 0, 0])
            while now - window[0][0] > self.config.window_s:
                window.popleft()
        bucket = window[-1]
        bucket[1] += 1
        if not ok:
            bucket[2] += 1
        self._consecutive = 0 if ok else self._consecutive + 1
        if not ok and self.state == CLOSED and self._tripped():
            self._open(now)

    def _tripped(self) -> bool:
        c = self.config
        if self._consecutive >= c.consecutive_failures:
            return True
        requests = sum(b[1] for b in self._window)
        if requests < c.min_requests:
            return False
        return sum(b[2] for b in self._window) / requests >= c.error_rate

    def _open(self, now: float) -> None:
        self.state, self._opened_at = OPEN, now

    def _close(self) -> None:
        self.state, self._consecutive = CLOSED, 0
        self._window.clear()
