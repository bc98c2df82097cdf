"""``GET /admin/history``: the per-minute hashes (``gateway/observe/history.py``) as
series the operator page draws, oldest minute first.

    {"minutes": [1764547200, ...], "seconds": [60, ..., 23],     # the last is the current one
     "slo": {"ttft_s": 0.45, "tpot_s": 0.04},
     "requests": [{"pool", "model", "class", "counts": [...]}],  # class 2xx 4xx 429 5xx other
     "ttft": [{"pool", "model", "p50_s": [...], "p95_s": [...]}],   # null: no request that minute
     "tpot": [{"pool", "model", "p50_s": [...], "p95_s": [...]}],
     "queue": [{"pool", "model", "peak": [...]}],    # peak depth, summed over workers
     "in_flight": [{"model", "peak": [...]}],
     "spend": [{"team", "daily_limit_usd", "spent_today_usd": [...]}],
     "cache_hit_rate": [{"model", "rate": [...]}],   # cached / prompt tokens, null: none
     "cache_saved_usd": [{"cache", "usd": [...]}], "response_cache": [{"result", "counts"}],
     "cache_write_premium_usd": [...],       # writes above the input price: net = saved - this
     "escalations": [...], "fallbacks": [...], "escalation_rate": [...], "fallback_rate": [...]}

One pipelined HGETALL per minute shown, on one hash slot. Quantiles are read off
the summed buckets as PromQL's ``histogram_quantile`` does
(``gateway/observe/overview.py``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import orjson

from gateway.observe.history import minute_key, parse_field
from gateway.observe.overview import bucket_quantile

if TYPE_CHECKING:
    from redis.asyncio import Redis

Series = list[float | None]


class _Minutes:
    """Per-minute sums for each series key, as the hashes are read."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sums: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0] * n)
        self.buckets: dict[tuple[str, ...], list[dict[float, float]]] = defaultdict(
            lambda: [defaultdict(float) for _ in range(n)])
        self.spend: dict[str, tuple[Series, float | None]] = {}

    def add(self, i: int, key: list[str], raw: bytes) -> None:
        try:
            self._add(i, key, raw)
        except (ValueError, TypeError, IndexError, orjson.JSONDecodeError):
            pass                        # a field from another version: skipped

    def _add(self, i: int, key: list[str], raw: bytes) -> None:
        kind = key[0]
        if kind == "s":
            spent, limit = orjson.loads(raw)
            series, _ = self.spend.setdefault(key[1], ([None] * self.n, None))
            series[i] = float(spent)
            self.spend[key[1]] = (series, None if limit is None else float(limit))
            return
        value = float(raw)
        if kind in ("t", "p") and len(key) == 4:
            self.buckets[(kind, key[1], key[2])][i][float(key[3])] += value
        elif kind in ("q", "i"):
            self.sums[tuple(key[:-1])][i] += value         # summed over workers
        else:
            self.sums[tuple(key)][i] += value


def _quantiles(kind: str, m: _Minutes) -> list[dict[str, Any]]:
    out = []
    for (k, pool, model), minutes in sorted(m.buckets.items()):
        if k != kind:
            continue
        rows = [sorted(b.items()) for b in minutes]
        out.append({"pool": pool, "model": model,
                    "p50_s": [_round(bucket_quantile(0.5, b)) for b in rows],
                    "p95_s": [_round(bucket_quantile(0.95, b)) for b in rows]})
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _rate(part: list[float], whole: list[float]) -> Series:
    return [round(p / w, 4) if w else None for p, w in zip(part, whole, strict=True)]


def _total(m: _Minutes, kind: str) -> list[float]:
    out = [0.0] * m.n
    for key, series in m.sums.items():
        if key[0] == kind:
            out = [a + b for a, b in zip(out, series, strict=True)]
    return out


def _hit_rates(m: _Minutes) -> list[dict[str, Any]]:
    """Per model and minute: prompt tokens read from the upstream's prefix cache, of all."""
    out = []
    for key, prompt in sorted(m.sums.items()):
        if len(key) == 3 and key[0] == "k" and key[2] == "prompt":
            cached = m.sums.get(("k", key[1], "cached"), [0.0] * m.n)
            out.append({"model": key[1], "rate": _rate(cached, prompt)})
    return out


def _series(m: _Minutes) -> dict[str, Any]:
    sums = sorted(m.sums.items())
    requests = _total(m, "r")
    escalations, fallbacks = _total(m, "e"), _total(m, "f")
    return {
        "requests": [{"pool": k[1], "model": k[2], "class": k[3], "counts": [int(v) for v in s]}
                     for k, s in sums if k[0] == "r" and len(k) == 4],
        "queue": [{"pool": k[1], "model": k[2], "peak": [int(v) for v in s]}
                  for k, s in sums if k[0] == "q" and len(k) == 3],
        "in_flight": [{"model": k[1], "peak": [int(v) for v in s]}
                      for k, s in sums if k[0] == "i" and len(k) == 2],
        "spend": [{"team": team, "daily_limit_usd": limit, "spent_today_usd": series}
                  for team, (series, limit) in sorted(m.spend.items())],
        "cache_hit_rate": _hit_rates(m),
        "cache_saved_usd": [{"cache": k[1], "usd": [round(v, 6) for v in s]}
                            for k, s in sums if k[0] == "v" and len(k) == 2],
        "response_cache": [{"result": k[1], "counts": [int(v) for v in s]}
                           for k, s in sums if k[0] == "h" and len(k) == 2],
        "cache_write_premium_usd": [round(v, 6) for v in m.sums.get(("w",), [0.0] * m.n)],
        "escalations": [int(v) for v in escalations], "fallbacks": [int(v) for v in fallbacks],
        "escalation_rate": _rate(escalations, requests),
        "fallback_rate": _rate(fallbacks, requests),
    }


async def read_history(redis: Redis, prefix: str, minutes: int, slo_ttft_s: float,
                       slo_tpot_s: float, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    current = int(now // 60) * 60
    starts = [current - 60 * (minutes - 1 - i) for i in range(minutes)]
    pipe = redis.pipeline(transaction=False)
    for start in starts:
        pipe.hgetall(minute_key(prefix, start))
    hashes = await pipe.execute()
    m = _Minutes(minutes)
    for i, fields in enumerate(hashes):
        for field, raw in fields.items():
            key = parse_field(field)
            if key is not None:
                m.add(i, key, raw)
    return {"minutes": starts, "seconds": [60] * (minutes - 1) + [max(1, int(now - current))],
            "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s},
            "ttft": _quantiles("t", m), "tpot": _quantiles("p", m),
            **_series(m)}
