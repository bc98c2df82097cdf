"""A pool's latency targets, and whether a candidate's prediction meets them.

    slo = SLO.from_config(config)
    slo.met("interactive", candidate)     # predicted TTFT and TPOT within the targets
    slo.slack(candidate)                  # worst of predicted/target: below 1 meets them

Only the interactive pool has targets (``pools.interactive``); batch work has
no TTFT SLO, so it always meets its own.

The TTFT judged here counts every waiter already queued on the model, even
when its queue serves the newest first (adaptive LIFO, ``scheduling/scheduler.py``).
LIFO changes who waits, not how long the queue waits on average: a newcomer
that jumps a standing queue makes an older waiter late. A model with a
standing queue has no room for more on-time work, so SLO-aware routing
sends the request where there is room instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import GatewayConfig
from policies.base import Candidate

AT_RISK = "at-risk"       # the x-routegate-slo header's value


def queued_ttft_s(c: Candidate) -> float:
    """``c.ttft_s``, with the waiters a LIFO prediction skipped served first."""
    stats = c.stats
    if not stats.lifo or stats.queued <= 0:
        return c.ttft_s
    slot_s = c.latency_s     # a slot's length until one is measured: this request's
    return c.ttft_s + stats.queue_wait_s(stats.queued, slot_s) - stats.queue_wait_s(0, slot_s)


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_s: float
    tpot_s: float

    @classmethod
    def from_config(cls, config: GatewayConfig) -> SLO:
        pool = config.pools.interactive
        return cls(pool.ttft_ms / 1000, pool.tpot_ms / 1000)

    def slack(self, c: Candidate) -> float:
        return max(queued_ttft_s(c) / self.ttft_s, c.tpot_s / self.tpot_s)

    def met(self, pool: str, c: Candidate) -> bool:
        return pool != "interactive" or self.slack(c) <= 1.0
