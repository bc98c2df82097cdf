"""From per-request results to the report's figures: percentiles, goodput, SLO attainment.

    slo = Slo(ttft_s=0.45, tpot_s=0.04)
    summary = summarize(results, window_s=30, slo=slo)   # {"pools": {...}, "models": {...}}

Goodput is the number of requests that completed *and* met the SLO (TTFT and
TPOT both within it) per second of the arrival window (DistServe's
definition). SLO attainment is the share of the requests sent that did so: a
request that failed or was cut at the end of the run missed it. A pool with
no latency SLO (batch) counts every completed request as good.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.client import Result

QUANTILES = (50, 95, 99)


@dataclass(frozen=True)
class Slo:
    ttft_s: float
    tpot_s: float

    def met(self, r: Result) -> bool:
        tpot = r.tpot_s
        return (r.completed and r.ttft_s is not None and tpot is not None
                and r.ttft_s <= self.ttft_s and tpot <= self.tpot_s)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def quantiles_ms(values: Iterable[float | None]) -> dict[str, float | None]:
    seconds = [v for v in values if v is not None]
    out: dict[str, float | None] = {}
    for q in QUANTILES:
        p = percentile(seconds, q)
        out[f"p{q}"] = None if p is None else round(p * 1000, 2)
    return out


def group_summary(results: list[Result], window_s: float, slo: Slo | None) -> dict[str, Any]:
    """The figures of one group of requests (a pool, or a model)."""
    done = [r for r in results if r.completed]
    good = [r for r in done if slo is None or slo.met(r)]
    errors: dict[str, int] = {}
    for r in results:
        if not r.completed:
            errors[r.error or "unknown"] = errors.get(r.error or "unknown", 0) + 1
    return {
        "sent": len(results),
        "completed": len(done),
        "good": len(good),
        "goodput_rps": round(len(good) / window_s, 3) if window_s > 0 else 0.0,
        "slo_attainment": round(len(good) / len(results), 4) if results else None,
        "completed_rps": round(len(done) / window_s, 3) if window_s > 0 else 0.0,
        "output_tokens_per_s": round(sum(r.output_tokens for r in done) / window_s, 1)
        if window_s > 0 else 0.0,
        "ttft_ms": quantiles_ms(r.ttft_s for r in done),
        "tpot_ms": quantiles_ms(r.tpot_s for r in done),
        "itl_ms": quantiles_ms(gap for r in done for gap in r.itl_s),
        "e2e_ms": quantiles_ms(r.e2e_s for r in done),
        "retried": sum(1 for r in done if r.attempts > 1),
        "errors": errors,
    }


def model_mix(results: list[Result]) -> dict[str, int]:
    mix: dict[str, int] = {}
    for r in results:
        if r.completed and r.model:
            mix[r.model] = mix.get(r.model, 0) + 1
    return dict(sorted(mix.items()))


def summarize(results: list[Result], window_s: float, slos: dict[str, Slo | None],
              pools: Sequence[str] = ("interactive", "batch")) -> dict[str, Any]:
    """Per pool and per model; ``slos`` maps a pool to its SLO (None: no latency SLO)."""
    by_pool = {p: [r for r in results if r.pool == p] for p in pools}
    out_pools = {}
    for pool, rows in by_pool.items():
        summary = group_summary(rows, window_s, slos.get(pool))
        summary["models"] = model_mix(rows)
        out_pools[pool] = summary
    models = sorted({r.model for r in results if r.model})
    out_models = {}
    for name in models:
        rows = [r for r in results if r.model == name]
        # A model's figures are judged by the SLO of the pool each request ran in.
        out_models[name] = {pool: group_summary([r for r in rows if r.pool == pool], window_s,
                                                slos.get(pool))
                            for pool in pools if any(r.pool == pool for r in rows)}
    late = [r.late_s for r in results]
    return {"pools": out_pools, "models": out_models,
            "client_late_ms": quantiles_ms(late)}
