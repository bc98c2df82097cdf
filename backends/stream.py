"""Per-stream measurement: TTFT, inter-token latency and the upstream's usage."""

from __future__ import annotations

import time

from backends.base import LiveStats, Usage
from backends.sse import SSEEvent


class StreamMeter:
    """Watches the events of one stream and reports into the backend's LiveStats.

    TTFT is the time to the first chunk that carries tokens; TPOT is the mean
    gap between token-bearing chunks after it (one chunk is about one token
    for every server we relay).
    """

    __slots__ = ("_stats", "_started", "_first", "_last", "_chunks", "usage", "ttft_s", "done",
                 "_finished")

    def __init__(self, stats: LiveStats) -> None:
        self._stats = stats
        self._started = time.perf_counter()
        self._first = 0.0
        self._last = 0.0
        self._chunks = 0
        self.usage: Usage | None = None
        self.ttft_s: float | None = None
        self.done = False
        self._finished = False

    def observe(self, event: SSEEvent) -> None:
        if event.done:
            self.done = True
            return
        if event.data is None:
            return
        usage = event.data.get("usage")
        if usage:
            self.usage = Usage.from_wire(usage)
        if event.has_tokens:
            now = time.perf_counter()
            if self._chunks == 0:
                self._first = now
                self.ttft_s = now - self._started
            self._last = now
            self._chunks += 1

    @property
    def tpot_s(self) -> float | None:
        if self._chunks < 2:
            return None
        return (self._last - self._first) / (self._chunks - 1)

    def finish(self) -> None:
        """Fold this stream's timings into the backend's smoothed stats, once."""
        if self._finished:
            return
        self._finished = True
        self._stats.requests += 1
        if self.ttft_s is not None:
            self._stats.observe_ttft(self.ttft_s)
        tpot = self.tpot_s
        if tpot is not None:
            self._stats.observe_tpot(tpot)


class MeteredStream:
    """What every backend's stream reports, read from its ``StreamMeter``."""

    _meter: StreamMeter
    _stats: LiveStats
    _closed: bool = False

    def _close_once(self) -> bool:
        """The first close leaves the backend's in-flight count and folds this
        stream's timings into its stats; later ones return False."""
        if self._closed:
            return False
        self._closed = True
        self._stats.in_flight -= 1
        self._meter.finish()
        return True

    @property
    def usage(self) -> Usage | None:
        return self._meter.usage

    @property
    def ttft_s(self) -> float:
        return self._meter.ttft_s or 0.0

    @property
    def tpot_s(self) -> float | None:
        return self._meter.tpot_s
