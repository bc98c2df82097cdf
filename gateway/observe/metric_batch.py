"""Per-request metric updates as plain additions, handed to prometheus_client in batches.

    pending = PendingHistogram(histogram.labels("interactive", "fast"))
    pending.observe(0.21)         # a bisect and two additions: ~0.2 us
    pending.flush()               # into the real metric: once a second, and before a scrape

Each prometheus_client update takes a lock (or, with several workers, writes a
memory-mapped file): 0.4-1 us. Ten of them per request came to about 10 us, a
few per cent of routegate's throughput on their own. Adding up locally and
flushing once a second costs about 2 us a request, plus a few dozen updates a
second. A scrape flushes its
own worker first, so a single-process server is always exact; another
worker's last second may be missing from a scrape.

``PendingHistogram.flush`` adds to the histogram's per-bucket values, exactly
what ``Histogram.observe`` does one observation at a time (prometheus_client
keeps them in ``_buckets`` and ``_sum``; pyproject pins prometheus-client to
its minor version, and tests/gateway/test_internals.py fails, naming the
attribute, when a release moves them).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any


class PendingCounter:
    __slots__ = ("child", "value")

    def __init__(self, child: Any) -> None:
        self.child, self.value = child, 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def flush(self) -> None:
        if self.value:
            self.child.inc(self.value)
            self.value = 0.0


class PendingHistogram:
    __slots__ = ("child", "bounds", "counts", "total", "seen")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.bounds: list[float] = list(child._upper_bounds)   # ends with +Inf
        self.counts = [0] * len(self.bounds)
        self.total = 0.0
        self.seen = False

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1   # first bound >= amount: "le"
        self.total += amount
        self.seen = True

    def flush(self) -> None:
        if not self.seen:
            return
        for i, n in enumerate(self.counts):
            if n:
                self.child._buckets[i].inc(n)
                self.counts[i] = 0
        self.child._sum.inc(self.total)
        self.total, self.seen = 0.0, False
