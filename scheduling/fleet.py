"""Sharing each model's concurrency and load among the gateway replicas, through Redis.

    share = FleetShare(redis.client, "rg", replica_id, schedulers)
    state.spawn(share.run())          # a heartbeat every 0.25 s; each scheduler rescaled

Every gateway process (a ``--workers`` worker, or another host) schedules its
own admissions. If each admitted a model's whole ``max_concurrency``, N of
them would send the upstream N times what it can run, and its own queue,
first come first served, would undo the pools' priorities. So each replica
beats (``ZADD {prefix}:sched:replicas replica now``), counts the replicas
that beat within ``window_s``, and each of its schedulers admits
``ceil(max_concurrency / replicas)``.

The same beat carries each replica's load per model (``HSET
{prefix}:sched:load replica {at, models: {model: [backlog, admitted]}}``: the
prompt tokens it admitted that are not yet prefilled, and the requests it
runs there) and brings back the others'. Their sums, while fresh, join this
replica's own figures in its predictions (``LiveStats.take_peers``): the
queue at a shared upstream holds every replica's prompts, and a replica that
saw only its own would admit work the others' make late. Every 0.25 s,
because a second-old count is stale at the scale of a TTFT target; the
upstream's own ``/metrics`` (``backends/load_signals.py``) are read at about
1 Hz, and stand in while the peers' figures are stale.

One pipelined round trip per replica per beat crosses Redis, whatever the
traffic. (A model that admits on time also keeps its prefill backlog in Redis
while replicas share it, one round trip per admission: ``shared_backlog.py``;
in a burst from idle, a beat is too late.) A replica that cannot reach Redis keeps its
last count (alone, at start) and, once the peers' figures go stale, predicts
from its own; a replica that stops drops out after ``window_s``. Clocks of
different hosts are compared, so they must agree to well within a second
(NTP does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import orjson

from core.aio import raise_if_cancelled
from core.types import PEER_STALE_S
from scheduling.scheduler import PoolScheduler

logger = logging.getLogger("routegate.scheduler")

BEAT_S = 0.25
WINDOW_S = 3.0
# A peer's report is at most this long, and its figures are clamped to this.
MAX_REPORT_BYTES = 64 * 1024
MAX_FIGURE = 1e9


def replicas_key(prefix: str) -> str:
    """The sorted set of live replicas (what else needs to know who is alive reads it)."""
    return f"{prefix}:sched:replicas"


class FleetShare:
    def __init__(self, redis: Any, prefix: str, replica_id: str,
                 schedulers: Mapping[str, PoolScheduler], *, window_s: float = WINDOW_S) -> None:
        self.redis = redis
        self.key = replicas_key(prefix)
        self.load_key = f"{prefix}:sched:load"
        self.replica_id = replica_id
        self.schedulers = schedulers
        self.window_s = window_s
        self.replicas = 1

    async def beat(self) -> int:
        """Announce this replica and its load, count the live ones, rescale, and
        take the others' load; returns the count."""
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.key, {self.replica_id: now})
        pipe.zremrangebyscore(self.key, "-inf", now - self.window_s)
        pipe.zcard(self.key)
        pipe.expire(self.key, int(self.window_s * 10) + 1)   # nothing left when all stop
        pipe.hset(self.load_key, self.replica_id, self._report(now))
        pipe.expire(self.load_key, int(self.window_s * 10) + 1)
        pipe.hgetall(self.load_key)
        results = await pipe.execute()
        replicas = max(1, int(results[2]))
        if replicas != self.replicas:
            logger.info("%d gateway replicas share each model's max_concurrency", replicas)
            self.replicas = replicas
            for scheduler in self.schedulers.values():
                scheduler.share(replicas)
        stale = self._take_peers(results[-1], now)
        if stale:
            await self.redis.hdel(self.load_key, *stale)
        return replicas

    def _report(self, now: float) -> bytes:
        mono = time.monotonic()
        models = {}
        for name, scheduler in self.schedulers.items():
            stats = scheduler.stats
            backlog = stats.backlog(stats.backlog_rate, mono) if stats.backlog_rate else 0.0
            models[name] = [round(backlog, 1), scheduler.active]
        return orjson.dumps({"at": now, "models": models})

    def _take_peers(self, reports: Mapping[Any, Any], now: float) -> list[Any]:
        """Sum the other replicas' fresh reports into each model's stats; returns
        the fields of replicas gone longer than ``window_s``."""
        sums: dict[str, list[float]] = {}
        oldest, stale = now, []
        for replica, raw in reports.items():
            if replica in (self.replica_id, self.replica_id.encode()):
                continue
            report = _parse(raw) or {}
            at = report.get("at")
            if not isinstance(at, (int, float)) or now - at > self.window_s:
                stale.append(replica)
                continue
            if now - at > PEER_STALE_S:
                continue
            oldest = min(oldest, float(at))
            for name, figures in (report.get("models") or {}).items():
                if name in self.schedulers and _figures(figures):
                    total = sums.setdefault(name, [0.0, 0.0])
                    total[0] += min(MAX_FIGURE, figures[0])
                    total[1] += min(MAX_FIGURE, figures[1])
        at = time.monotonic() - max(0.0, now - oldest) if sums else 0.0
        for name, scheduler in self.schedulers.items():
            backlog, admitted = sums.get(name, (0.0, 0.0))
            scheduler.stats.take_peers(backlog, admitted, at)
        return stale

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


def _parse(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, (bytes, str)) or len(raw) > MAX_REPORT_BYTES:
        return None
    try:
        report = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return report if isinstance(report, dict) else None


def _figures(figures: Any) -> bool:
    return (isinstance(figures, list) and len(figures) == 2
            and all(isinstance(f, (int, float)) and math.isfinite(f) and f >= 0
                    for f in figures))
