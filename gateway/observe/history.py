"""The last hour, per minute, in Redis: what ``/ui``'s charts read, the same on every
replica and after a restart.

    history = History(redis, prefix, replica_id, metrics, gw)
    state.spawn(history.run())       # samples every SAMPLE_S, writes every FLUSH_S
    await history.flush()            # at shutdown, before Redis closes

Each worker writes what it counted since its last write into one hash per minute,
``{prefix}:{history}:<minute's epoch s>`` (one hash tag: a cluster keeps the
hour on one node), with HINCRBY, so replicas and workers add up. The counts are
read off this worker's own Prometheus metrics (``gateway/observe/metrics.py``):
nothing is added to the request path. A field is a JSON array:

    ["r", pool, model, class]      requests; class 2xx | 4xx | 429 | 5xx | other
    ["t", pool, model, le]         TTFT histogram bucket (cumulative, as Prometheus's)
    ["p", pool, model, le]         time per output token (the stream's mean ITL)
    ["e", pool, reason]            escalations; ["f", pool, reason] fallbacks
    ["c", team]                    spend in USD (HINCRBYFLOAT)
    ["k", model, kind]             tokens: prompt | completion | cached (of the prompt)
    ["v", cache]                   USD the caches saved: prefix | response (HINCRBYFLOAT)
    ["w"]                          USD prompt-cache writes cost above the input price (same)
    ["h", result]                  response-cache answers: hit | miss
    ["q", pool, model, worker]     the worker's peak queue depth in the minute (HSET)
    ["i", model, worker]           the worker's peak upstream calls in flight (HSET)
    ["s", team]                    [spent today, daily hard limit or null] (HSET: the latest)

A minute's hash expires ``metrics.history_minutes`` + 5 minutes after its last write.
A write that fails (Redis down) is retried with the next one: its counts
land a little later, in a later minute, rather than being lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client.core import Metric

from gateway.observe.live import model_figures

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.observe.metrics import Metrics
    from gateway.state import AppState

logger = logging.getLogger("routegate.history")

SAMPLE_S = 1.0          # the gauges (queue depth, in flight): in memory, every second
FLUSH_S = 10.0          # one pipelined write per worker
KEEP_EXTRA_S = 300

# Prometheus sample name -> the field's kind and the labels it keeps, in order.
_COUNTED = {
    "routegate_ttft_seconds_bucket": ("t", ("pool", "model", "le")),
    "routegate_itl_seconds_bucket": ("p", ("pool", "model", "le")),
    "routegate_escalations_total": ("e", ("pool", "reason")),
    "routegate_fallbacks_total": ("f", ("pool", "reason")),
    "routegate_cost_usd_total": ("c", ("team",)),
    "routegate_tokens_total": ("k", ("model", "kind")),
    "routegate_cache_saved_usd_total": ("v", ("cache",)),
    "routegate_cache_write_premium_usd_total": ("w", ()),
    "routegate_response_cache_total": ("h", ("result",)),
}


def minute_key(prefix: str, minute: int) -> str:
    return f"{prefix}:{{history}}:{minute}"


def status_class(status: str) -> str:
    if status == "429":
        return "429"
    return f"{status[0]}xx" if len(status) == 3 and status[0] in "2345" else "other"


def counted(families: Iterable[Metric]) -> dict[bytes, float]:
    """This worker's totals, keyed by history field."""
    out: dict[bytes, float] = defaultdict(float)
    for family in families:
        for s in family.samples:
            if s.name == "routegate_requests_total":
                key: list[str] = ["r", s.labels["pool"], s.labels["model"],
                                  status_class(s.labels["status"])]
            elif s.name in _COUNTED:
                kind, names = _COUNTED[s.name]
                key = [kind, *(s.labels[n] for n in names)]
            else:
                continue
            out[orjson.dumps(key)] += s.value
    return out


class History:
    def __init__(self, redis: Redis, prefix: str, worker: str, metrics: Metrics,
                 gw: AppState, keep_minutes: int) -> None:
        self.redis, self.prefix, self.worker = redis, prefix, worker
        self.metrics, self.gw = metrics, gw
        self.ttl_s = keep_minutes * 60 + KEEP_EXTRA_S
        self._written: dict[bytes, float] = {}      # the totals already in Redis
        self._peaks: dict[Any, Any] = {}             # this minute's gauge peaks: field -> peak
        self._peak_minute = 0
        self.failures = 0

    def sample(self, now: float) -> None:
        minute = int(now // 60) * 60
        if minute != self._peak_minute:
            self._peaks, self._peak_minute = {}, minute
        peaks = self._peaks
        for m in model_figures(self.gw):
            for pool, depth in m.queued.items():
                key = orjson.dumps(["q", pool, m.model, self.worker])
                peaks[key] = max(peaks.get(key, 0), depth)
            key = orjson.dumps(["i", m.model, self.worker])
            peaks[key] = max(peaks.get(key, 0), m.in_flight)

    async def _spend(self) -> dict[Any, Any]:
        live = await self.gw.telemetry.live.sample(self.gw)
        return {orjson.dumps(["s", t.team]): orjson.dumps([t.spent_today_usd, t.daily_limit_usd])
                for t in live.teams}

    async def flush(self, now: float | None = None) -> None:
        """Write what was counted since the last write into the current minute."""
        now = time.time() if now is None else now
        minute = int(now // 60) * 60
        self.metrics.flush()
        totals = counted(self.metrics.registry.collect())
        deltas = {k: v - self._written.get(k, 0.0) for k, v in totals.items()}
        key = minute_key(self.prefix, minute)
        pipe = self.redis.pipeline(transaction=False)
        for field, delta in deltas.items():
            if field.startswith((b'["c"', b'["v"', b'["w"')):      # dollars: floats
                if delta > 0:
                    pipe.hincrbyfloat(key, field, delta)
            elif round(delta):
                pipe.hincrby(key, field, round(delta))
        peaks = {k: v for k, v in self._peaks.items() if v} if self._peak_minute == minute else {}
        if peaks:       # a zero is what a missing field reads as
            pipe.hset(key, mapping=peaks)
        spend = await self._spend()     # one pipelined read per team, at most every 5 s
        if spend:
            pipe.hset(key, mapping=spend)
        pipe.expire(key, self.ttl_s)
        try:
            await pipe.execute()
        except Exception as exc:     # Redis down: these counts go with the next write
            self.failures += 1
            if self.failures == 1:
                logger.warning("history.write_failed", extra={"error": repr(exc)})
            return
        self.failures = 0
        self._written = totals

    async def run(self) -> None:
        slot = int(time.time() // FLUSH_S)
        while True:
            now = time.time()
            await asyncio.sleep(SAMPLE_S - now % SAMPLE_S)
            now = time.time()
            if int(now // FLUSH_S) != slot:
                slot = int(now // FLUSH_S)
                try:
                    await self.flush(now - 0.5)       # the slot that just ended
                except Exception:   # never let the recorder die quietly
                    logger.exception("history.flush_failed")
            self.sample(now)


def parse_field(field: bytes) -> list[Any] | None:
    try:
        key = orjson.loads(field)
    except orjson.JSONDecodeError:
        return None
    return key if isinstance(key, list) and key and all(isinstance(k, str) for k in key) else None
