"""The upstreams' load figures (backends/load_signals.py), read from real servers:
the standalone simulator's vLLM-format /metrics and llama.cpp's own /metrics."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import aiohttp
import httpx
import pytest

from backends.load_signals import LoadPoller, parse
from core.config import ModelConfig, Price
from core.types import LiveStats
from tests.support import base_config, run_gateway, run_simulator


def model(url: str, fmt: str, **metrics: Any) -> ModelConfig:
    return ModelConfig(name="m", backend="openai_compat", base_url=url, upstream_model="default",
                       price=Price(input_per_mtok=1, output_per_mtok=1),
                       scheduler={"max_concurrency": 2},   # type: ignore[arg-type]
                       load_metrics={"format": fmt, "interval_s": 0.2, **metrics})  # type: ignore[arg-type]


async def poll_once(poller: LoadPoller) -> bool:
    async with aiohttp.ClientSession() as session:
        return await poller.poll(session)


def in_background(url: str, model_name: str, n: int, max_tokens: int) -> list[threading.Thread]:
    def ask() -> None:
        httpx.post(url + "/chat/completions", timeout=60, json={
            "model": model_name, "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": "tell a long story"}]})
    threads = [threading.Thread(target=ask) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def test_each_format_is_read_bounded_and_per_model() -> None:
    vllm = ('vllm:num_requests_running{model_name="default"} 3\n'
            'vllm:num_requests_running{model_name="other"} 50\n'
            'vllm:num_requests_waiting{model_name="default"} 4\n'
            'vllm:kv_cache_usage_perc{model_name="default"} 0.5\n')
    assert parse(vllm, "vllm", "default") == (3, 4, 0.5)
    assert parse(vllm, "vllm", "unlisted") == (53, 4, 0.5)    # no series of its own: all
    old_vllm = "vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.25\n"
    assert parse(old_vllm, "vllm") == (1, 0, 0.25)
    assert parse("sglang:num_running_reqs 2\nsglang:num_queue_reqs 7\nsglang:token_usage 0.9\n",
                 "sglang") == (2, 7, 0.9)
    assert parse("tgi_batch_current_size 5\ntgi_queue_size 1\n", "tgi") == (5, 1, None)
    bounded = "vllm:num_requests_running 1e30\nvllm:num_requests_waiting NaN\n" \
              "vllm:kv_cache_usage_perc 7\n"
    assert parse(bounded, "vllm") == (1_000_000, 0, 1.0)
    with pytest.raises(ValueError):
        parse("vllm:num_requests_waiting 3\n", "vllm")   # no running count: no reading
    with pytest.raises(ValueError):
        parse("not prometheus {{{", "vllm")


def test_the_simulators_queue_is_seen_and_goes_stale() -> None:
    # Prefill at 20 tokens/s, one at a time: each short prompt takes about half a
    # second, so of 5 requests on 4 slots, 1 prefills and 4 wait. The KV cache
    # (8 tokens) is full with the four prompts held.
    with run_simulator("--max-batch", "4", "--tpot-ms", "50", "--prefill", "20",
                       "--kv-cache-tokens", "8") as url:
        stats = LiveStats()
        poller = LoadPoller(model(url, "vllm", stale_s=1.0), stats)
        assert poller.urls == [url.removesuffix("/v1") + "/metrics"]
        assert asyncio.run(poll_once(poller)) and stats.upstream_running == 0
        stats.add_backlog(10, 20.0, time.monotonic() - 60)   # this replica's prompts: ~10
        idle_ttft = stats.predicted_ttft_s(10, 20.0, fallback_slot_s=2.0)
        threads = in_background(url, "default", 5, 10)
        time.sleep(0.25)
        sim = httpx.get(url.removesuffix("/v1") + "/sim/stats").json()["default"]
        assert asyncio.run(poll_once(poller))
        assert (stats.upstream_running, stats.upstream_waiting) == (1, 4) == (
            sim["running"] - sim["prefill_queued"], sim["queued"] + sim["prefill_queued"])
        assert stats.upstream_kv == 1.0
        # Four waiting at the upstream that this replica did not admit: their
        # prompts join its predicted prefill backlog (4 x 10 tokens at 20/s).
        busy_ttft = stats.predicted_ttft_s(10, 20.0, fallback_slot_s=2.0)
        full_kv = stats.kv_wait_s(2.0)   # a full cache, 1 running: its slot time
        assert full_kv == pytest.approx(2.0)
        assert busy_ttft - full_kv == pytest.approx(idle_ttft + 4 * 10 / 20.0, abs=0.01)
        time.sleep(1.1)                                    # stale: back to its own figures
        assert stats.predicted_ttft_s(10, 20.0, fallback_slot_s=2.0) == pytest.approx(
            idle_ttft, abs=1e-3)
        for t in threads:
            t.join()


def test_a_silent_metrics_endpoint_is_a_failed_poll_not_a_hang() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        stats = LiveStats()
        poller = LoadPoller(model(f"http://127.0.0.1:{port}/v1", "vllm", timeout_s=0.3), stats)
        started = time.monotonic()
        assert not asyncio.run(poll_once(poller))        # accepted, never answered
        assert time.monotonic() - started < 2.0
        assert stats.upstream_at == 0.0
    finally:
        listener.close()


def test_the_real_llamacpp_metrics(llamacpp_url: str) -> None:
    stats = LiveStats()
    poller = LoadPoller(model(llamacpp_url, "llamacpp"), stats)
    threads = in_background(llamacpp_url, "gemma", 3, 40)    # llama.cpp runs one at a time
    seen = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:   # until all three have arrived (a loaded host is slow)
        assert asyncio.run(poll_once(poller))
        seen.append((stats.upstream_running, stats.upstream_waiting))
        if seen[-1] == (1, 2):
            break
        time.sleep(0.1)
    print(f"\nllama.cpp under 3 requests: (running, waiting) {seen}, kv {stats.upstream_kv}")
    assert seen[-1] == (1, 2)
    assert all(running <= 1 for running, _ in seen)
    for t in threads:
        t.join()
    assert asyncio.run(poll_once(poller)) and stats.upstream_running == 0


def test_a_gateway_polls_the_upstream_and_shows_the_readings_in_metrics(sim_url: str) -> None:
    config = base_config(sim_url)
    fast = next(m for m in config["models"] if m["name"] == "fast")
    fast["load_metrics"] = {"format": "vllm", "interval_s": 0.2}
    with run_gateway(config) as gw:
        deadline = time.monotonic() + 5
        while True:
            lines = [line for line in httpx.get(gw.url + "/metrics").text.splitlines()
                     if line.startswith("routegate_upstream_") and 'model="fast"' in line]
            if len(lines) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        figures = {line.split("{")[0]: float(line.split()[-1]) for line in lines}
        assert set(figures) == {"routegate_upstream_running", "routegate_upstream_waiting",
                                "routegate_upstream_kv_usage",
                                "routegate_upstream_reading_age_seconds"}, lines
        assert 0 <= figures["routegate_upstream_reading_age_seconds"] < 1.0
        assert figures["routegate_upstream_running"] >= 0
        # A model without load_metrics publishes none.
        assert not any('model="strong"' in line for line in httpx.get(gw.url + "/metrics").text
                       .splitlines() if line.startswith("routegate_upstream_"))
