"""Telemetry in one place: each request's ``Outcome`` becomes one
``request.completed`` event and the Prometheus metrics, from the same spot.

    telemetry = Telemetry.start(config)             # in the app's lifespan
    telemetry.request_completed(outcome)            # the pipeline's one finally
    body = telemetry.render(live)                   # GET /metrics

The request log is ``gateway/observe/request_log.py`` (structlog, batched writes);
the metrics and their names are ``gateway/observe/metrics.py``. Either can be
switched off (``logging.requests``, ``metrics.enabled``), which is only
useful to measure what they cost (``loadtest`` target ``routegate-nolog``).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from core.config import GatewayConfig
from gateway.observe.live import LiveFigures, LiveSampler
from gateway.observe.metrics import MULTIPROC_ENV, Metrics, fresh_metrics_dir
from gateway.observe.request_log import RequestLog
from gateway.pipeline.outcome import Outcome

__all__ = ["MULTIPROC_ENV", "Telemetry", "fresh_metrics_dir"]


class Telemetry:
    def __init__(self, metrics: Metrics | None, log: RequestLog | None) -> None:
        self.metrics = metrics
        self.log = log
        self.live = LiveSampler()

    @classmethod
    def start(cls, config: GatewayConfig) -> Telemetry:
        metrics = Metrics(config) if config.metrics.enabled else None
        return cls(metrics, RequestLog.open(config.logging, config.data_dir))

    def request_completed(self, o: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.observe(o)
        if self.log is not None:
            self.log.completed(o)

    def families(self) -> Iterable[Metric]:
        """The counted metric families, summed over workers (``/admin/overview``)."""
        return self.metrics.collect() if self.metrics is not None else []

    def render(self, live: LiveFigures | None = None) -> bytes:
        return self.metrics.render(live) if self.metrics is not None else b""

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.flush()
        if self.log is not None:
            self.log.close()
