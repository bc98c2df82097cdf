"""``GET /admin/overview``: the operator page's one JSON document.

    {"generated_at": 1764547200.1,
     "routing": [{"pool", "model", "reason", "requests", "share"}],      # since start
     "models":  [{"pool", "model", "requests", "client_errors" (4xx but 429), "rate_limited"
                  (429), "errors" (5xx), "ttft_p50_s", "ttft_p95_s", "tpot_p95_s",
                  "slo_attainment"}],
     "escalations": {"invalid_json": 3}, "fallbacks": {"upstream_error": 1},
     "breakers": {"fast": "closed"},            # or open, half_open, resting (after a 429)
     "now": [{"model", "breaker", "in_flight", "queued_interactive", "queued_batch"}],
     "teams": [{"team", "spent_today_usd", "daily_limit_usd", "remaining_usd", ...}],
     "batches": [{"id", "team", "status", "total", "completed", "failed", "expires_at"}]}

The counts are the Prometheus metrics' own (summed over every worker, as
``/metrics`` is), so the page and a dashboard never disagree. TTFT quantiles
are read off the histogram buckets the way PromQL's ``histogram_quantile``
does: linear within a bucket.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from prometheus_client.core import Metric

from gateway.observe.live import LiveFigures


def _samples(families: Iterable[Metric]) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in families:
        for s in family.samples:
            out[s.name].append((s.labels, s.value))
    return out


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """``histogram_quantile``: ``buckets`` are (upper bound, cumulative count)."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 0)
        lower, below = upper, count
    return lower


def _routing(samples: list[tuple[dict[str, str], float]]) -> list[dict[str, Any]]:
    mix: dict[tuple[str, str, str], float] = defaultdict(float)
    for labels, value in samples:
        if labels.get("status") == "200":
            mix[(labels["pool"], labels["model"], labels["reason"])] += value
    total = sum(mix.values()) or 1
    return [{"pool": p, "model": m, "reason": r, "requests": int(n), "share": round(n / total, 4)}
            for (p, m, r), n in sorted(mix.items())]


def _models(s: dict[str, list[tuple[dict[str, str], float]]]) -> list[dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def row(labels: dict[str, str]) -> dict[str, Any]:
        key = (labels["pool"], labels["model"])
        if key not in rows:
            rows[key] = {"pool": key[0], "model": key[1], "requests": 0, "client_errors": 0,
                         "rate_limited": 0, "errors": 0, "ttft_p50_s": None,
                         "ttft_p95_s": None, "tpot_p95_s": None, "slo_attainment": None,
                         "_buckets": [], "_tpot": [], "_slo": [0.0, 0.0]}
        return rows[key]

    for labels, value in s.get("routegate_requests_total", ()):
        r = row(labels)
        r["requests"] += int(value)
        status = labels["status"]
        column = {"4": "client_errors", "5": "errors"}.get(status[:1])
        if status == "429":
            column = "rate_limited"
        if column:
            r[column] += int(value)
    for labels, value in s.get("routegate_ttft_seconds_bucket", ()):
        row(labels)["_buckets"].append((float(labels["le"]), value))
    for labels, value in s.get("routegate_itl_seconds_bucket", ()):
        row(labels)["_tpot"].append((float(labels["le"]), value))
    for labels, value in s.get("routegate_slo_requests_total", ()):
        row(labels)["_slo"][labels["result"] == "met"] += value
    for r in rows.values():
        r["ttft_p50_s"] = _round(bucket_quantile(0.5, r["_buckets"]))
        r["ttft_p95_s"] = _round(bucket_quantile(0.95, r["_buckets"]))
        r["tpot_p95_s"] = _round(bucket_quantile(0.95, r.pop("_tpot")))
        missed, met = r.pop("_slo")
        r["slo_attainment"] = round(met / (met + missed), 4) if met + missed else None
        del r["_buckets"]
    return [rows[k] for k in sorted(rows)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _by_reason(samples: list[tuple[dict[str, str], float]]) -> dict[str, int]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in samples:
        out[labels["reason"]] += value
    return {k: int(v) for k, v in sorted(out.items())}


def build_overview(families: Iterable[Metric], live: LiveFigures) -> dict[str, Any]:
    s = _samples(families)
    return {
        "generated_at": round(time.time(), 3),
        "routing": _routing(s.get("routegate_requests_total", [])),
        "models": _models(s),
        "escalations": _by_reason(s.get("routegate_escalations_total", [])),
        "fallbacks": _by_reason(s.get("routegate_fallbacks_total", [])),
        "breakers": {m.model: m.breaker for m in live.models},
        "now": [{"model": m.model, "breaker": m.breaker, "in_flight": m.in_flight,
                 "queued_interactive": m.queued.get("interactive", 0),
                 "queued_batch": m.queued.get("batch", 0)} for m in live.models],
        "teams": [asdict(t) for t in live.teams],
        "batches": [b for b in live.batches if b["status"] not in ("completed", "failed")],
    }
