"""``routegate report``: what each team's traffic cost and how it went, over a window.

    routegate report --since 1h                 # a table per team and model
    routegate report --since 1d --json          # the same as JSON

Reads the request log's file (``<data_dir>/logs/requests.jsonl`` and its
rotated copies, see ``gateway/observe/request_log.py``) for the per-request figures,
and Redis for each team's spend and remaining budget today. Per team and model:

- requests, completed (HTTP 200), failed (5xx), refused (4xx and 499);
- cost and energy per **completed** task: everything the rows' requests cost,
  the refused answers of escalations and failed tries included, divided by the
  completed ones;
- p50 and p95 time to first token of the completed requests;
- escalation and fallback rates: the share of requests that escalated, and
  that fell back after a failed attempt;
- the prefix-cache hit rate (prompt tokens the upstream read from its cache,
  of all prompt tokens) and the answers given from the team's response cache.

The "model" is the one that answered; "-" gathers the requests no model answered.
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from core.config import GatewayConfig
from gateway.observe.request_log import EVENT, FILE_NAME, log_dir


def log_files(data_dir: str | Path) -> list[Path]:
    """The log and its rotated copies, oldest first."""
    base = log_dir(data_dir) / FILE_NAME
    rotated = sorted(base.parent.glob(FILE_NAME + ".*[0-9]"),
                     key=lambda p: int(p.suffix[1:]), reverse=True)
    return [*rotated, base] if base.exists() else rotated


def _epoch(stamp: Any) -> float:
    """Epoch seconds (the JSON log's form) or ISO 8601 (written from a TTY session)."""
    if isinstance(stamp, int | float):
        return float(stamp)
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return 0.0


def read_events(files: list[Path], since: datetime) -> Iterator[dict[str, Any]]:
    cutoff = since.timestamp()
    for path in files:
        with open(path, "rb") as f:
            for line in f:
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue   # a line cut by a crash
                if event.get("event") == EVENT and _epoch(event.get("timestamp")) >= cutoff:
                    yield event


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Row:
    team: str
    pool: str
    model: str
    requests: int = 0
    completed: int = 0
    failed: int = 0
    refused: int = 0
    cost_usd: float = 0.0
    energy_j: float | None = None       # None: no model of these requests has energy figures
    escalated: int = 0
    fell_back: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    response_cache_hits: int = 0
    ttft: list[float] = field(default_factory=list)

    def add(self, e: dict[str, Any]) -> None:
        status = int(e.get("status") or 0)
        self.requests += 1
        if status == 200:
            self.completed += 1
            if e.get("ttft_s") is not None:
                self.ttft.append(float(e["ttft_s"]))
        elif status >= 500:
            self.failed += 1
        else:
            self.refused += 1
        self.cost_usd += float(e.get("cost_usd") or 0)
        if e.get("energy_j") is not None:
            self.energy_j = (self.energy_j or 0.0) + float(e["energy_j"])
        self.escalated += bool(e.get("escalations"))
        self.prompt_tokens += _count(e.get("prompt_tokens"))
        self.cached_tokens += _count(e.get("cached_tokens"))
        self.cache_write_tokens += _count(e.get("cache_write_tokens"))
        self.response_cache_hits += e.get("response_cache") == "hit"
        self.fell_back += bool(e.get("fallbacks"))

    def summary(self) -> dict[str, Any]:
        done = self.completed
        return {
            "team": self.team, "pool": self.pool, "model": self.model,
            "requests": self.requests,
            "completed": done, "failed": self.failed, "refused": self.refused,
            "cost_usd": round(self.cost_usd, 9),
            "cost_per_completed_usd": round(self.cost_usd / done, 9) if done else None,
            "energy_per_completed_j": (round(self.energy_j / done, 3)
                                       if done and self.energy_j is not None else None),
            "ttft_p50_s": _quantile(self.ttft, 0.50), "ttft_p95_s": _quantile(self.ttft, 0.95),
            "escalation_rate": round(self.escalated / self.requests, 4),
            "fallback_rate": round(self.fell_back / self.requests, 4),
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "prefix_cache_hit_rate": (round(self.cached_tokens / self.prompt_tokens, 4)
                                      if self.prompt_tokens else None),
            "cache_write_tokens": self.cache_write_tokens,
            "cache_write_rate": (round(self.cache_write_tokens / self.prompt_tokens, 4)
                                 if self.prompt_tokens else None),
            "response_cache_hits": self.response_cache_hits,
        }


def _count(value: Any) -> int:
    """A token count from a log line: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def summarise(events: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: dict[tuple[str, str, str], Row] = {}
    for e in events:
        key = (str(e.get("team") or "-"), str(e.get("pool") or "-"), str(e.get("model") or "-"))
        if key not in rows:
            rows[key] = Row(*key)
        rows[key].add(e)
    return [rows[k].summary() for k in sorted(rows)]


async def team_budgets(config: GatewayConfig) -> list[dict[str, Any]] | None:
    """Each team's spend and remaining budget from Redis; None if Redis is not there."""
    from budget.keys import KeySpace
    from budget.redis_client import open_redis
    from budget.usage import team_usage

    # No URL: the embedded server of this data_dir, joined (or started from its
    # append-only file, and stopped again once the report lets go).
    try:
        redis = await open_redis(config.effective_redis_url, Path(config.data_dir))
    except Exception:
        return None
    keys = KeySpace(config.budget.key_prefix, config.budget.timezone)
    try:
        async with asyncio.timeout(5):
            reports = await asyncio.gather(*(team_usage(redis.client, keys, t.name, t.budget,
                                                        days=1) for t in config.teams))
    except Exception:
        return None
    finally:
        await redis.close()
    keep = ("team", "spent_today_usd", "spent_month_usd", "remaining_today_usd",
            "remaining_month_usd", "soft_limited")
    return [{k: r.get(k) for k in keep} for r in reports]


def build_report(config: GatewayConfig, since: timedelta, *, with_redis: bool = True
                 ) -> dict[str, Any]:
    start = datetime.now(UTC) - since
    files = log_files(config.data_dir)
    rows = summarise(read_events(files, start))
    teams = asyncio.run(team_budgets(config)) if with_redis else None
    totals: dict[str, float] = defaultdict(float)
    for r in rows:
        for name in ("requests", "completed", "failed", "refused", "cost_usd",
                     "prompt_tokens", "cached_tokens", "cache_write_tokens",
                     "response_cache_hits"):
            totals[name] += r[name]
    return {"since": start.isoformat(), "log_files": [str(f) for f in files], "rows": rows,
            "totals": dict(totals), "teams": teams}


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "usd":
        return f"${value:.6f}" if value < 1 else f"${value:,.2f}"
    if kind == "ms":
        return f"{value * 1000:.0f}"
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "j":
        return f"{value:.1f}"
    return str(value)


COLUMNS = [("team", "team", ""), ("pool", "pool", ""), ("model", "model", ""),
           ("requests", "requests", ""),
           ("completed", "completed", ""), ("failed", "failed", ""), ("refused", "refused", ""),
           ("cost_per_completed_usd", "$/completed", "usd"),
           ("energy_per_completed_j", "J/completed", "j"), ("ttft_p50_s", "TTFT p50 ms", "ms"),
           ("ttft_p95_s", "TTFT p95 ms", "ms"), ("escalation_rate", "escalated", "pct"),
           ("fallback_rate", "fell back", "pct"),
           ("prefix_cache_hit_rate", "prompt cached", "pct"),
           ("cache_write_rate", "cache written", "pct"),
           ("response_cache_hits", "cache hits", "")]


def print_report(report: dict[str, Any]) -> None:
    """The report as tables on the terminal (rich)."""
    from rich.console import Console
    from rich.table import Table

    # Piped into a file or a pager, keep every column whole.
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title=f"routegate since {report['since']}")
    for _, title, kind in COLUMNS:
        table.add_column(title, justify="left" if not kind and title in ("team", "pool", "model")
                         else "right")
    for row in report["rows"]:
        table.add_row(*(_fmt(row[key], kind) for key, _, kind in COLUMNS))
    console.print(table)
    if not report["rows"]:
        console.print(f"no requests in {', '.join(report['log_files']) or 'the request log'}")
    if report["teams"]:
        budgets = Table(title="budgets (Redis, now)")
        for title in ("team", "spent today", "spent month", "left today", "left month", "soft"):
            budgets.add_column(title, justify="left" if title == "team" else "right")
        for t in report["teams"]:
            budgets.add_row(t["team"], _fmt(t["spent_today_usd"], "usd"),
                            _fmt(t["spent_month_usd"], "usd"), _fmt(t["remaining_today_usd"], "usd"),
                            _fmt(t["remaining_month_usd"], "usd"), "yes" if t["soft_limited"] else "")
        console.print(budgets)
