"""What the gateway looks like right now: breakers, load, budgets, batches.

    live = await LiveSampler().sample(gw)       # for /metrics and /admin/overview
    live.models[0].breaker, live.teams[0].remaining_usd, live.batch_lines()

Breakers, in-flight calls and queues are this worker's own (in memory, free
to read). Budgets and batches are in Redis: one pipelined read per team and
one for at most ``MAX_BATCHES`` active batches, done at most every
``TTL_S`` seconds whatever the scrape rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scheduling.breaker import STATE_CODE

if TYPE_CHECKING:
    from gateway.state import AppState

MAX_BATCHES = 20
TTL_S = 5.0


@dataclass(slots=True)
class ModelLive:
    model: str
    breaker: str
    in_flight: int
    queued: dict[str, int]            # pool -> requests waiting in the scheduler
    # The upstream's own figures (load_metrics): running, waiting, KV use (or
    # None), and the reading's age in seconds; None before the first reading.
    upstream: tuple[float, float, float | None, float] | None = None
    provider: str = ""                # the model's backend: openai_compat, anthropic, ...
    upstream_model: str = ""          # the id its upstream knows it by

    @property
    def breaker_code(self) -> int:
        return STATE_CODE.get(self.breaker, 0)


@dataclass(slots=True)
class TeamLive:
    team: str
    spent_today_usd: float = 0.0
    spent_month_usd: float = 0.0
    remaining_usd: float | None = None          # the tighter hard limit, today or this month
    daily_limit_usd: float | None = None
    soft_limited: bool = False


@dataclass(slots=True)
class LiveFigures:
    models: list[ModelLive]
    teams: list[TeamLive] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)   # the label recorder's counts
    shadows: dict[str, int] = field(default_factory=dict)  # shadow answers' outcomes
    feedback: dict[tuple[str, str], int] = field(default_factory=dict)  # (team, result)

    def batch_lines(self) -> dict[str, int]:
        lines = {"pending": 0, "completed": 0, "failed": 0}
        for b in self.batches:
            lines["completed"] += b["completed"]
            lines["failed"] += b["failed"]
            lines["pending"] += max(0, b["total"] - b["completed"] - b["failed"])
        return lines


def model_figures(gw: AppState) -> list[ModelLive]:
    out = []
    for name, backend in gw.backends.items():
        stats = backend.stats
        queued = {"interactive": getattr(stats, "queued", 0),   # the scheduler's, when present
                  "batch": getattr(stats, "queued_batch", 0)}
        upstream = None
        if stats.upstream_at:
            upstream = (stats.upstream_running, stats.upstream_waiting, stats.upstream_kv,
                        time.monotonic() - stats.upstream_at)
        model = gw.models[name]
        out.append(ModelLive(name, gw.breakers[name].state, stats.in_flight, queued, upstream,
                             model.backend, model.wire_model))
    return out


def _team_figures(report: dict[str, Any]) -> TeamLive:
    left = [v for v in (report.get("remaining_today_usd"), report.get("remaining_month_usd"))
            if v is not None]
    limits = report.get("limits") or {}
    return TeamLive(report["team"], report["spent_today_usd"], report["spent_month_usd"],
                    min(left) if left else None, limits.get("daily_hard_usd"),
                    bool(report.get("soft_limited")))


async def _teams(gw: AppState) -> list[TeamLive]:
    teams = gw.config.teams
    reports = await asyncio.gather(*(gw.budget.usage(t.name, t.budget, days=1) for t in teams),
                                   return_exceptions=True)
    return [_team_figures(r) for r in reports if isinstance(r, dict)]


def _int(fields: dict[str, str], name: str) -> int:
    with contextlib.suppress(KeyError, ValueError):
        return int(fields[name])
    return 0


async def _batches(gw: AppState) -> list[dict[str, Any]]:
    if gw.batch is None:
        return []
    store = gw.batch.batches
    ids = (await store.active_ids())[:MAX_BATCHES]
    rows = await asyncio.gather(*(store.fields(i) for i in ids))
    return [{"id": f.get("id", i), "team": f.get("team"), "status": f.get("status"),
             "total": _int(f, "total"), "completed": _int(f, "completed"),
             "failed": _int(f, "failed"), "expires_at": _int(f, "expires_at")}
            for i, f in zip(ids, rows, strict=True) if f]


class LiveSampler:
    """Samples ``LiveFigures``; the Redis part is reused for ``TTL_S`` seconds."""

    def __init__(self) -> None:
        self._stored: tuple[float, list[TeamLive], list[dict[str, Any]]] | None = None

    async def sample(self, gw: AppState) -> LiveFigures:
        now = time.monotonic()
        if self._stored is None or now - self._stored[0] > TTL_S:
            try:
                teams, batches = await asyncio.gather(_teams(gw), _batches(gw))
            except Exception:   # Redis down: show what is in memory
                teams, batches = [], []
            self._stored = (now, teams, batches)
        labels = ({} if gw.labels is None else
                  {"written": gw.labels.written, "dropped": gw.labels.dropped,
                   "lost": gw.labels.lost})
        shadows = {"compared": gw.shadows.compared, "skipped": gw.shadows.skipped,
                   "failed": gw.shadows.failed, "cut": gw.shadows.cut}
        feedback = {} if gw.labels is None else dict(gw.labels.feedback_results)
        return LiveFigures(model_figures(gw), self._stored[1], self._stored[2], labels, shadows,
                           feedback)
