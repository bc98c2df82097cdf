"""The Prometheus metrics: counted from each request's ``Outcome``, plus live gauges.

    metrics = Metrics(config)
    metrics.observe(outcome)                  # per request, a few increments
    body = metrics.render(live)               # GET /metrics (live: gateway/observe/live.py)

Per request (counters and histograms; with ``routegate serve --workers N`` every
worker counts into files under ``PROMETHEUS_MULTIPROC_DIR`` and a scrape sums
them all):

    routegate_requests_total{team,pool,model,reason,status}
    routegate_request_duration_seconds{pool,model}     end to end (histogram)
    routegate_ttft_seconds{pool,model}                 time to first token
    routegate_itl_seconds{pool,model}                  mean inter-token latency of a stream
    routegate_queue_wait_seconds{pool,model}           waiting in the scheduler
    routegate_classifier_seconds                       complexity classifier
    routegate_slo_requests_total{pool,model,result}    interactive TTFT within pools.interactive
    routegate_tokens_total{team,model,kind}            kind: prompt | completion | cached | cache_write
                                                       (cached ÷ prompt: the prefix-cache hit rate)
    routegate_cache_saved_usd_total{team,model,cache}  cache: prefix | response
    routegate_cache_write_premium_usd_total{team,model}  prompt-cache writes above the input price
    routegate_response_cache_total{team,result}        result: hit | miss
    routegate_cost_usd_total{team,model}
    routegate_model_info{model,provider,upstream_model}  1 per model: join for per-provider sums
    routegate_energy_joules_total{team,model}
    routegate_escalations_total{pool,reason}
    routegate_fallbacks_total{pool,reason}
    routegate_usage_anomalies_total{model,kind}
    routegate_overdraft_usd_total{team}

Live, as this worker sees them at the scrape (gauges):

    routegate_breaker_state{model}                     0 closed, 1 open, 2 half-open, 3 resting
    routegate_in_flight{model}; routegate_queue_depth{model,pool}
    routegate_upstream_running{model}; routegate_upstream_waiting{model}
    routegate_upstream_kv_usage{model}; routegate_upstream_reading_age_seconds{model}
                                                       the upstream's own figures (load_metrics)
    routegate_budget_remaining_usd{team}               hard limit left, as last seen, no Redis call
    routegate_batch_lines{state}                       active batches (one bounded read)
    routegate_budget_journal_quarantined_total
    routegate_labels_total{result}                     labels from traffic: written | dropped | lost
    routegate_shadows_total{result}                    shadow answers: compared | skipped | failed | cut
    routegate_feedback_total{team,result}              feedback: ok | unknown | already | throttled

No label is per key or per request: teams, models, pools, reasons and statuses
are all bounded by the config and the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from budget.journal import QUARANTINED_METRIC
from core.config import GatewayConfig
from gateway.observe.live import LiveFigures
from gateway.observe.metric_batch import PendingCounter, PendingHistogram
from gateway.pipeline.outcome import Outcome, Share

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"   # read by prometheus_client at import
FLUSH_S = 1.0      # per-request updates reach prometheus_client within this

# From 10 ms (a cached or tiny answer) to 120 s (a long generation).
LLM_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1, 1.5, 2.5, 5,
               10, 20, 30, 60, 120)

# The classifier's time, from 100 us to 0.1 s: its budget is 1 ms at p99.
CLASSIFIER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01,
                      0.025, 0.1)


class Metrics:
    def __init__(self, config: GatewayConfig) -> None:
        self.registry = r = CollectorRegistry()
        self.slo_ttft_s = config.pools.interactive.ttft_ms / 1000

        def hist(name: str, doc: str, labels: list[str],
                 buckets: tuple[float, ...] = LLM_BUCKETS) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r)

        def count(name: str, doc: str, labels: list[str]) -> Counter:
            return Counter(name, doc, labels, registry=r)

        self.requests = count("routegate_requests", "Requests by outcome",
                              ["team", "pool", "model", "reason", "status"])
        self.e2e = hist("routegate_request_duration_seconds", "End to end", ["pool", "model"])
        self.ttft = hist("routegate_ttft_seconds", "Time to first token", ["pool", "model"])
        self.itl = hist("routegate_itl_seconds", "Mean inter-token latency of a stream",
                        ["pool", "model"])
        self.queue = hist("routegate_queue_wait_seconds", "Time queued before the upstream call",
                          ["pool", "model"])
        self.classifier = hist("routegate_classifier_seconds", "Complexity classifier", [],
                               CLASSIFIER_BUCKETS)
        self.slo = count("routegate_slo_requests", "Interactive requests by TTFT SLO result",
                         ["pool", "model", "result"])
        self.tokens = count("routegate_tokens", "Tokens", ["team", "model", "kind"])
        self.cost = count("routegate_cost_usd", "Spend in USD", ["team", "model"])
        self.energy = count("routegate_energy_joules", "Estimated energy", ["team", "model"])
        self.escalations = count("routegate_escalations", "Escalations by reason",
                                 ["pool", "reason"])
        self.fallbacks = count("routegate_fallbacks", "Fallbacks after a failed attempt",
                               ["pool", "reason"])
        self.usage_anomalies = count(
            "routegate_usage_anomalies", "Upstream usage corrected before billing (negative, "
            "unreadable, or past what the model can read or write)", ["model", "kind"])
        self.saved = count("routegate_cache_saved_usd", "What caches saved: prompt tokens read "
                           "from the upstream's prefix cache at their price instead of the input "
                           "price (cache=prefix), answers from the response cache (response)",
                           ["team", "model", "cache"])
        self.write_premium = count(
            "routegate_cache_write_premium_usd", "What prompt-cache writes cost above the "
            "input price (Anthropic's 1.25x): the prefix cache's net saving is "
            "cache_saved_usd{cache=\"prefix\"} less this", ["team", "model"])
        self.response_cache = count("routegate_response_cache", "Requests a team's response "
                                    "cache was asked for: hit | miss", ["team", "result"])
        self.overdraft = count("routegate_overdraft_usd", "Billed above the reservation: the "
                               "upstream counted more of the prompt than the gateway", ["team"])
        self._children: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._share_series: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._pending: list[PendingCounter | PendingHistogram] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._classifier = self._hold(self.classifier)

    def _hold(self, child: Any) -> Any:
        pending = (PendingHistogram if isinstance(child, Histogram) else PendingCounter)(child)
        self._pending.append(pending)
        return pending

    def _series(self, o: Outcome) -> tuple[Any, ...]:
        """The pending updates of one request's labels, made once."""
        team, model = o.team or "-", o.model or "-"
        key = (team, o.pool, model, o.reason, o.status)
        series = self._children.get(key)
        if series is None:
            pm = (o.pool, model)
            series = self._children[key] = tuple(self._hold(child) for child in (
                self.requests.labels(team, o.pool, model, o.reason or "-", str(o.status)),
                self.e2e.labels(*pm), self.ttft.labels(*pm), self.itl.labels(*pm),
                self.queue.labels(*pm), self.slo.labels(*pm, "met"),
                self.slo.labels(*pm, "missed"), self.tokens.labels(team, model, "prompt"),
                self.tokens.labels(team, model, "completion"),
                self.cost.labels(team, model), self.energy.labels(team, model),
                self.tokens.labels(team, model, "cached"),
                self.tokens.labels(team, model, "cache_write")))
        return series

    def observe(self, o: Outcome) -> None:
        (requests, e2e, ttft, itl, queue, met, missed, prompt, completion, cost,
         energy, cached, written) = self._series(o)
        requests.inc()
        e2e.observe(o.latency_s)
        if o.ttft_s is not None:
            ttft.observe(o.ttft_s)
            if o.pool == "interactive" and o.status == 200:
                (met if o.ttft_s <= self.slo_ttft_s else missed).inc()
        if o.tpot_s is not None:
            itl.observe(o.tpot_s)
        queue_wait = getattr(o, "queue_wait_s", None)   # set by the scheduler, when there is one
        if queue_wait is not None:
            queue.observe(queue_wait)
        if o.classify_s is not None:
            self._classifier.observe(o.classify_s)
        if o.shares:                     # billed on several models: each part under its own
            self._observe_shares(o.team or "-", o.shares)
        else:
            if o.prompt_tokens or o.completion_tokens or o.cost_usd:   # a hit bills no tokens
                prompt.inc(o.prompt_tokens)
                completion.inc(o.completion_tokens)
                cost.inc(o.cost_usd)
            if o.cached_tokens:
                cached.inc(o.cached_tokens)
            if o.cache_write_tokens:
                written.inc(o.cache_write_tokens)
            if o.cache_saved_usd:
                kind = "response" if o.response_cache == "hit" else "prefix"
                self.saved.labels(o.team or "-", o.model or "-", kind).inc(o.cache_saved_usd)
            if o.cache_write_premium_usd:
                self.write_premium.labels(o.team or "-", o.model or "-").inc(
                    o.cache_write_premium_usd)
        if o.energy_j:
            energy.inc(o.energy_j)
        if o.response_cache is not None:
            self.response_cache.labels(o.team or "-", o.response_cache).inc()
        for reason in o.escalations or ():
            self.escalations.labels(o.pool, reason).inc()
        for reason in o.fallbacks or ():
            self.fallbacks.labels(o.pool, reason).inc()
        if o.usage_anomaly is not None:
            self.usage_anomalies.labels(o.model or "-", o.usage_anomaly).inc()
        if o.overdraft_usd:
            self.overdraft.labels(o.team or "-").inc(o.overdraft_usd)
        if self._flush_timer is None:
            with contextlib.suppress(RuntimeError):   # no event loop: flushed at collect()
                self._flush_timer = asyncio.get_running_loop().call_later(FLUSH_S, self.flush)

    def _observe_shares(self, team: str, shares: list[Share]) -> None:
        for x in shares:
            series = self._share_series.get((team, x.model))
            if series is None:
                series = self._share_series[(team, x.model)] = tuple(self._hold(child) for child in (
                    self.tokens.labels(team, x.model, "prompt"),
                    self.tokens.labels(team, x.model, "completion"),
                    self.tokens.labels(team, x.model, "cached"),
                    self.tokens.labels(team, x.model, "cache_write"), self.cost.labels(team, x.model)))
            prompt, completion, cached, written, cost = series
            prompt.inc(x.prompt_tokens)
            completion.inc(x.completion_tokens)
            cached.inc(x.cached_tokens)
            written.inc(x.cache_write_tokens)
            cost.inc(x.cost_usd)
            if x.saved_usd:
                self.saved.labels(team, x.model, "prefix").inc(x.saved_usd)
            if x.premium_usd:
                self.write_premium.labels(team, x.model).inc(x.premium_usd)

    def flush(self) -> None:
        """Hand the pending updates to prometheus_client (gateway/observe/metric_batch.py)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        for pending in self._pending:
            pending.flush()

    def collect(self) -> Iterable[Metric]:
        """The counted families, summed over all workers when there are several."""
        self.flush()
        if os.environ.get(MULTIPROC_ENV):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return registry.collect()
        # One process: the journal's counter lives on the default registry.
        return [*self.registry.collect(),
                *REGISTRY.restricted_registry([QUARANTINED_METRIC]).collect()]

    def render(self, live: LiveFigures | None = None) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(self.collect()))
        if live is not None:
            registry.register(_Families(live_families(live)))
        return generate_latest(registry)


class _Families:
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def live_families(live: LiveFigures) -> Iterator[Metric]:
    breaker = GaugeMetricFamily("routegate_breaker_state",
                                "Circuit breaker: 0 closed, 1 open, 2 half-open, "
                                "3 resting (an upstream 429's Retry-After)", labels=["model"])
    in_flight = GaugeMetricFamily("routegate_in_flight", "Upstream calls open",
                                  labels=["model"])
    queued = GaugeMetricFamily("routegate_queue_depth", "Requests waiting in the scheduler",
                               labels=["model", "pool"])
    upstream = {name: GaugeMetricFamily(f"routegate_upstream_{name}", about, labels=["model"])
                for name, about in (
                    ("running", "Sequences the upstream runs, all replicas' (its /metrics)"),
                    ("waiting", "Requests waiting at the upstream itself (its /metrics)"),
                    ("kv_usage", "The upstream's KV-cache use, 0..1 (its /metrics)"),
                    ("reading_age_seconds", "Age of the last reading of the upstream's /metrics"))}
    # One series per model naming its provider: join on it, e.g. sum by (provider)
    # (routegate_cost_usd_total * on(model) group_left(provider) routegate_model_info).
    info = GaugeMetricFamily("routegate_model_info", "A configured model: its provider (the "
                             "backend) and its upstream id; always 1",
                             labels=["model", "provider", "upstream_model"])
    for m in live.models:
        info.add_metric([m.model, m.provider, m.upstream_model], 1)
        breaker.add_metric([m.model], m.breaker_code)
        in_flight.add_metric([m.model], m.in_flight)
        for pool, depth in m.queued.items():
            queued.add_metric([m.model, pool], depth)
        if m.upstream is not None:
            running, waiting, kv, age = m.upstream
            upstream["running"].add_metric([m.model], running)
            upstream["waiting"].add_metric([m.model], waiting)
            if kv is not None:
                upstream["kv_usage"].add_metric([m.model], kv)
            upstream["reading_age_seconds"].add_metric([m.model], age)
    budget = GaugeMetricFamily("routegate_budget_remaining_usd",
                               "Hard budget left as this worker last saw it",
                               labels=["team"])
    for t in live.teams:
        if t.remaining_usd is not None:
            budget.add_metric([t.team], t.remaining_usd)
    lines = GaugeMetricFamily("routegate_batch_lines", "Lines of active batches by state",
                              labels=["state"])
    for state, n in live.batch_lines().items():
        lines.add_metric([state], n)
    yield from (info, breaker, in_flight, queued, *upstream.values(), budget, lines,
                *learning_families(live))


def learning_families(live: LiveFigures) -> tuple[Metric, ...]:
    """Labels, shadow answers and feedback, as this worker counted them."""
    recorded = CounterMetricFamily("routegate_labels", "Labels and feedback records from the "
                                   "traffic: written, dropped (buffer full), lost (Redis "
                                   "failed)", labels=["result"])
    for result, n in live.labels.items():
        recorded.add_metric([result], n)
    shadows = CounterMetricFamily("routegate_shadows", "Shadow answers (teams[].shadow): "
                                  "compared, skipped (too many at once), failed, cut (reached "
                                  "its output cap: not judged)",
                                  labels=["result"])
    for result, n in live.shadows.items():
        shadows.add_metric([result], n)
    feedback = CounterMetricFamily("routegate_feedback", "POST /v1/feedback lookups by "
                                   "result: ok, unknown (404), already (409), throttled (429)",
                                   labels=["team", "result"])
    for (team, result), n in live.feedback.items():
        feedback.add_metric([team, result], n)
    return recorded, shadows, feedback


def fresh_metrics_dir(data_dir: str) -> Path:
    """An empty directory for the workers' metric files (a restart starts from zero,
    as a single process does)."""
    path = Path(data_dir) / "metrics"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
