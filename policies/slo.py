"""A pool's latency targets, and whether a candidate's prediction meets them.

    slo = SLO.from_config(config)
    slo.met("interactive", candidate)     # predicted TTFT and TPOT within the targets
    slo.slack(candidate)                  # worst of predicted/target: below 1 meets them

Only the interactive pool has targets (``pools.interactive``); batch work has
no TTFT SLO, so it always meets its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import GatewayConfig
from policies.base import Candidate

AT_RISK = "at-risk"       # the x-routegate-slo header's value


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_s: float
    tpot_s: float

    @classmethod
    def from_config(cls, config: GatewayConfig) -> SLO:
        pool = config.pools.interactive
        return cls(pool.ttft_ms / 1000, pool.tpot_ms / 1000)

    def slack(self, c: Candidate) -> float:
        return max(c.ttft_s / self.ttft_s, c.tpot_s / self.tpot_s)

    def met(self, pool: str, c: Candidate) -> bool:
        return pool != "interactive" or self.slack(c) <= 1.0
