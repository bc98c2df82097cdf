"""Telemetry in one place: one ``request.completed`` event per request, and
the Prometheus metrics updated from the same record.

    telemetry.request_completed(record)

The event is one JSON line on the ``routegate.request`` logger, so any log
shipper can take it; ``GET /metrics`` serves the metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

logger = logging.getLogger("routegate.request")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    team: str | None = None
    key: str | None = None
    pool: str = "interactive"
    model: str | None = None
    reason: str | None = None
    status: int = 200
    error_code: str | None = None
    stream: bool = False
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_estimated: bool = False
    cost_usd: float = 0.0
    energy_j: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    latency_s: float = 0.0
    predicted_quality: float | None = None
    confidence: float | None = None
    budget: str | None = None


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("routegate_requests", "Requests by outcome",
                                ["team", "model", "status"], registry=r)
        self.latency = Histogram("routegate_request_duration_seconds", "Time to last byte",
                                 ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("routegate_ttft_seconds", "Time to first token", ["model"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("routegate_tokens", "Tokens", ["team", "model", "kind"], registry=r)
        self.cost = Counter("routegate_cost_usd", "Spend in USD", ["team", "model"], registry=r)

    def request_completed(self, rec: RequestRecord) -> None:
        team, model = rec.team or "-", rec.model or "-"
        self.requests.labels(team, model, str(rec.status)).inc()
        self.latency.labels(model).observe(rec.latency_s)
        if rec.ttft_s is not None:
            self.ttft.labels(model).observe(rec.ttft_s)
        if rec.prompt_tokens or rec.completion_tokens:
            self.tokens.labels(team, model, "prompt").inc(rec.prompt_tokens)
            self.tokens.labels(team, model, "completion").inc(rec.completion_tokens)
            self.cost.labels(team, model).inc(rec.cost_usd)
        if logger.isEnabledFor(logging.INFO):
            event = {"event": "request.completed"}
            for name in RequestRecord.__slots__:   # asdict() deep-copies: slow per request
                event[name] = getattr(rec, name)
            logger.info(orjson.dumps(event).decode())

    def render(self) -> bytes:
        return generate_latest(self.registry)
