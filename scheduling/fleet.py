"""Sharing each model's concurrency among the gateway replicas, through Redis.

    share = FleetShare(redis.client, "rg", replica_id, schedulers)
    state.spawn(share.run())          # a heartbeat a second; each scheduler rescaled

Every gateway process (a ``--workers`` worker, or another host) schedules its
own admissions. If each admitted a model's whole ``max_concurrency``, N of
them would send the upstream N times what it can run, and its own queue,
first come first served, would undo the pools' priorities. So each replica
beats (``ZADD {prefix}:sched:replicas replica now``), counts the replicas
that beat within ``window_s``, and each of its schedulers admits
``ceil(max_concurrency / replicas)``.

Only that count crosses Redis: one pipelined round trip per replica per
second, whatever the traffic. The queues, in-flight counts and latency
stats that decisions read stay each replica's own: they describe what that
replica admitted, which is what its next admission competes with. A replica
that cannot reach Redis keeps its last count (alone, at start), and a
replica that stops drops out after ``window_s``. Clocks of different hosts
are compared, so they must agree to well within ``window_s`` (NTP does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from core.aio import raise_if_cancelled
from scheduling.scheduler import PoolScheduler

logger = logging.getLogger("routegate.scheduler")

BEAT_S = 1.0
WINDOW_S = 3.0


def replicas_key(prefix: str) -> str:
    """The sorted set of live replicas (what else needs to know who is alive reads it)."""
    return f"{prefix}:sched:replicas"


class FleetShare:
    def __init__(self, redis: Any, prefix: str, replica_id: str,
                 schedulers: Mapping[str, PoolScheduler], *, window_s: float = WINDOW_S) -> None:
        self.redis = redis
        self.key = replicas_key(prefix)
        self.replica_id = replica_id
        self.schedulers = schedulers
        self.window_s = window_s
        self.replicas = 1

    async def beat(self) -> int:
        """Announce this replica, count the live ones, rescale; returns the count."""
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.key, {self.replica_id: now})
        pipe.zremrangebyscore(self.key, "-inf", now - self.window_s)
        pipe.zcard(self.key)
        pipe.expire(self.key, int(self.window_s * 10) + 1)   # nothing left when all stop
        replicas = max(1, int((await pipe.execute())[2]))
        if replicas != self.replicas:
            logger.info("%d gateway replicas share each model's max_concurrency", replicas)
            self.replicas = replicas
            for scheduler in self.schedulers.values():
                scheduler.share(replicas)
        return replicas

    async def leave(self) -> None:
        await self.redis.zrem(self.key, self.replica_id)

    async def run(self, every_s: float = BEAT_S) -> None:
        failing = False
        try:
            while True:
                raise_if_cancelled()  # redis-py's wait_for may have swallowed a cancel
                try:
                    await self.beat()
                    failing = False
                except Exception as exc:   # Redis down: keep the last count, try again
                    if not failing:        # once per outage, not once a second
                        logger.warning("scheduler heartbeat failed (%s); keeping %d replicas",
                                       type(exc).__name__, self.replicas)
                    failing = True
                await asyncio.sleep(every_s)
        finally:
            with contextlib.suppress(Exception):   # best effort: the entry expires anyway
                await asyncio.shield(self.leave())
