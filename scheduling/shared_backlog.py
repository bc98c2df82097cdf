"""The fleet's prefill backlog per model, kept in Redis, exact at each admission.

    shared = SharedBacklog(redis.client, "rg", "small")
    ahead = await shared.add(prompt_tokens, rate)   # the fleet's backlog ahead; None: failed
    shared.add_later(prompt_tokens, rate)           # the same, not waited for

The heartbeat (``scheduling/fleet.py``) tells each replica the others' prefill
backlogs every 0.25 s. In a burst from idle that is too late: each replica
admits half the burst predicting from its own half, and the upstream's prefill
queue, which holds both, makes the last of them late. So where several
replicas front a model that admits on time (``scheduler.refuse_late``), every
admission adds its prompt to one counter per model in Redis, and an
interactive request with a free slot reads back, in the same round trip, the
backlog ahead of it: every replica's admissions so far, since Redis runs the
script for one at a time. The counter is a fluid: it drains at the prefill
rate the caller passes, since its last change, by Redis's clock (``TIME``), so
the hosts' clocks need not agree.

One round trip per admission while more than one replica is live, bounded by
``timeout_s``; one replica alone makes none. A failed or slow call returns
``None``: the scheduler predicts from the heartbeat's figures, as before, and
the failure is logged once per outage. Each model has its own key, so a Redis
Cluster serves it as it is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger("routegate.scheduler")

TIMEOUT_S = 0.1
MAX_TOKENS = 1e9          # the counter is clamped to this
EXPIRE_S = 60             # an idle model's counter goes

# KEYS[1] the model's counter; ARGV: tokens to add (negative: taken back), the
# prefill rate (tokens/s). Returns the backlog before the add, drained to now.
ADD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or 0
local at = tonumber(held[2]) or now
local rate = math.max(0, tonumber(ARGV[2]) or 0)
local ahead = math.max(0, tokens - rate * math.max(0, now - at))
local after = math.min(tonumber(ARGV[3]), math.max(0, ahead + (tonumber(ARGV[1]) or 0)))
redis.call('HSET', KEYS[1], 'tokens', tostring(after), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return tostring(ahead)
"""


def backlog_key(prefix: str, model: str) -> str:
    return f"{prefix}:sched:backlog:{model}"


class SharedBacklog:
    def __init__(self, redis: Any, prefix: str, model: str, *,
                 timeout_s: float = TIMEOUT_S) -> None:
        self.key = backlog_key(prefix, model)
        self.model = model
        self.timeout_s = timeout_s
        self._add = redis.register_script(ADD)
        self._later: set[asyncio.Task[float | None]] = set()
        self.failing = False

    async def add(self, tokens: float, rate: float) -> float | None:
        """Add ``tokens`` to the fleet's backlog; returns the backlog ahead of them
        (tokens, every replica's), or ``None`` if Redis did not answer in time."""
        try:
            async with asyncio.timeout(self.timeout_s):
                raw = await self._add(keys=[self.key],
                                      args=[float(tokens), float(rate), MAX_TOKENS, EXPIRE_S])
            ahead = min(MAX_TOKENS, max(0.0, float(raw)))
        except Exception as exc:    # Redis down or slow: the heartbeat's figures stand in
            if not self.failing:
                logger.warning("the shared prefill backlog of %s failed (%s); predicting "
                               "from the heartbeat", self.model, type(exc).__name__)
            self.failing = True
            return None
        self.failing = False
        return ahead

    def add_later(self, tokens: float, rate: float) -> None:
        """``add``, in the background (an admission that does not wait for it)."""
        task = asyncio.get_running_loop().create_task(self.add(tokens, rate))
        self._later.add(task)
        task.add_done_callback(self._later.discard)
