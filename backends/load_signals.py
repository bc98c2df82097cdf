"""The upstreams' own load figures, read from their Prometheus ``/metrics``.

    poller = LoadPoller(model_config, backend.stats)     # model_config.load_metrics set
    task = asyncio.create_task(poller.run())             # ~1 Hz per upstream replica

A gateway replica sees only what it admitted; the upstream sees every
replica's requests. Inference servers publish that load, and schedulers such
as the Gateway API Inference Extension (llm-d) route on it:

- ``vllm``: running ``vllm:num_requests_running``, waiting
  ``vllm:num_requests_waiting``, KV ``vllm:kv_cache_usage_perc`` (older:
  ``vllm:gpu_cache_usage_perc``);
- ``sglang``: ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage``;
- ``tgi``: ``tgi_batch_current_size``, ``tgi_queue_size`` (no KV figure);
- ``llamacpp``: ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
  ``llamacpp:kv_cache_usage_ratio`` (where the build publishes it).

Each upstream replica's figures are summed (running, waiting) or averaged
(KV use) into the model's ``LiveStats`` (``core/types.py``), whose
predictions use them while they are fresh. Where a series carries a
``model_name`` label, only the model's own (``upstream_model``) count.

Bounded, as everything an upstream says: a reply over ``MAX_BODY_BYTES`` or
``timeout_s`` is a failed poll, counts are clamped to ``MAX_COUNT`` and KV use
to 0..1, NaN and negative figures are dropped. Polls run off the request path;
parsing (prometheus_client's parser) runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from core.aio import raise_if_cancelled
from core.config import ModelConfig
from core.types import LiveStats

log = logging.getLogger("routegate.backends")

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_COUNT = 1_000_000.0


@dataclass(frozen=True, slots=True)
class MetricNames:
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv: tuple[str, ...] = ()


FORMATS: dict[str, MetricNames] = {
    "vllm": MetricNames(("vllm:num_requests_running",), ("vllm:num_requests_waiting",),
                        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    "sglang": MetricNames(("sglang:num_running_reqs",), ("sglang:num_queue_reqs",),
                          ("sglang:token_usage",)),
    "tgi": MetricNames(("tgi_batch_current_size",), ("tgi_queue_size",)),
    "llamacpp": MetricNames(("llamacpp:requests_processing",), ("llamacpp:requests_deferred",),
                            ("llamacpp:kv_cache_usage_ratio",)),
}


class Reading(NamedTuple):
    running: float
    waiting: float
    kv: float | None


def parse(text: str, fmt: str, model: str | None = None) -> Reading:
    """One upstream's figures; raises ValueError when the running count is missing."""
    names = FORMATS[fmt]
    wanted = {*names.running, *names.waiting, *names.kv}
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                found.setdefault(sample.name, []).append((sample.labels, float(sample.value)))

    def value(candidates: tuple[str, ...], *, mean: bool = False) -> float | None:
        for name in candidates:
            samples = found.get(name)
            if not samples:
                continue
            own = [v for labels, v in samples if labels.get("model_name") == model]
            values = [v for v in (own or [v for _, v in samples])
                      if not math.isnan(v) and v >= 0]
            if values:
                return sum(values) / len(values) if mean else sum(values)
        return None

    running = value(names.running)
    if running is None:
        raise ValueError(f"no {names.running[0]} in the upstream's metrics")
    kv = value(names.kv, mean=True)
    return Reading(min(running, MAX_COUNT), min(value(names.waiting) or 0.0, MAX_COUNT),
                   None if kv is None else min(kv, 1.0))


def metrics_urls(model: ModelConfig) -> list[str]:
    """``load_metrics.url`` (one or a list), else each base_url's origin + /metrics."""
    settings = model.load_metrics
    if settings is not None and settings.url:
        return [settings.url] if isinstance(settings.url, str) else list(settings.url)
    return [url.removesuffix("/v1") + "/metrics" for url in model.base_urls]


# llama.cpp answers 501 on /metrics unless it was started with its metrics on.
LLAMACPP_HINT = ("; llama.cpp serves /metrics only when started with --metrics "
                 "(xllamacpp: endpoint_metrics = True)")


class LoadPoller:
    def __init__(self, model: ModelConfig, stats: LiveStats) -> None:
        settings = model.load_metrics
        assert settings is not None and settings.format != "none"
        self.name = model.name
        self.model = model.wire_model
        self.format = settings.format
        self.urls = metrics_urls(model)
        self.interval_s = settings.interval_s
        self.timeout_s = settings.timeout_s
        self.stats = stats
        stats.upstream_stale_s = settings.stale_s
        stats.upstream_capacity = model.max_concurrency
        self._failing: set[str] = set()

    async def _read(self, session: aiohttp.ClientSession, url: str) -> Reading | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                async with session.get(url) as reply:
                    if reply.status != 200:
                        raise ValueError(f"HTTP {reply.status}" + (
                            LLAMACPP_HINT if self.format == "llamacpp" and reply.status == 501
                            else ""))
                    body = await reply.content.read(MAX_BODY_BYTES + 1)
            if len(body) > MAX_BODY_BYTES:
                raise ValueError(f"over {MAX_BODY_BYTES} bytes")
            reading = await asyncio.to_thread(parse, body.decode("utf-8", "replace"),
                                              self.format, self.model)
        except Exception as exc:
            if url not in self._failing:
                log.warning("model %s: load metrics from %s unreadable (%s: %s); its "
                            "predictions use this replica's own figures", self.name, url,
                            type(exc).__name__, exc)
                self._failing.add(url)
            return None
        if url in self._failing:
            log.info("model %s: load metrics from %s readable again", self.name, url)
            self._failing.discard(url)
        return reading

    async def poll(self, session: aiohttp.ClientSession) -> bool:
        """Read every upstream replica once; the stats take the sum if all answered."""
        readings = await asyncio.gather(*(self._read(session, url) for url in self.urls))
        if any(r is None for r in readings):
            return False   # a partial sum would understate the load: let the last go stale
        done = [r for r in readings if r is not None]
        kvs = [r.kv for r in done if r.kv is not None]
        self.stats.take_upstream(sum(r.running for r in done), sum(r.waiting for r in done),
                                 sum(kvs) / len(kvs) if kvs else None, time.monotonic())
        return True

    async def run(self) -> None:
        async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=len(self.urls) + 1)) as session:
            while True:
                raise_if_cancelled()
                started = time.monotonic()
                await self.poll(session)
                await asyncio.sleep(max(0.05, self.interval_s - (time.monotonic() - started)))


def start_pollers(models: list[ModelConfig], stats: dict[str, LiveStats]) -> list[Any]:
    """A polling coroutine for each model whose load_metrics names a format."""
    return [LoadPoller(m, stats[m.name]).run() for m in models
            if m.load_metrics is not None and m.load_metrics.format != "none"
            and m.name in stats]
