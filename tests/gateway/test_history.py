"""The per-minute history ``/ui`` charts (``gateway/observe/history.py``): real gateways
on one real Redis, so that two replicas add up, a restart sees what came before,
and a Redis outage delays the counts without losing them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import redis
import redis.asyncio as aioredis

from core.config import GatewayConfig
from gateway.observe.history import FLUSH_S, counted, minute_key, status_class
from gateway.observe.history_view import read_history
from gateway.observe.metrics import Metrics
from gateway.pipeline.outcome import Outcome
from tests.budget.servers import RedisServer
from tests.support import TEST_KEY, base_config, run_gateway, run_simulator

ADMIN_KEY = "sk-admin-history-test-5a4b3c2d1e"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
ENV = {"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}


def _chat(url: str, model: str, n: int, stream: bool = False) -> list[int]:
    body = {"model": model, "max_tokens": 6, "stream": stream,
            "messages": [{"role": "user", "content": "hello there"}]}
    with httpx.Client(headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30) as http:
        return [http.post(url + "/v1/chat/completions", json=body).status_code
                for _ in range(n)]


def _history(url: str, **params: int | str) -> httpx.Response:
    return httpx.get(url + "/admin/history", headers=ADMIN, params=params, timeout=10)


def _counts(history: dict) -> dict[tuple[str, str], int]:
    return {(r["model"], r["class"]): sum(r["counts"]) for r in history["requests"]}


def _wait_counts(url: str, want: dict[tuple[str, str], int], seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        history = _history(url).json()
        if _counts(history) == want or time.monotonic() > deadline:
            return history
        time.sleep(0.5)


def test_status_classes() -> None:
    assert [status_class(s) for s in ("200", "400", "404", "429", "502", "503", "-", "99")] == \
        ["2xx", "4xx", "4xx", "429", "5xx", "5xx", "other", "other"]


def test_two_replicas_and_a_restart_share_the_hour() -> None:
    with run_simulator() as sim:
        config = base_config(sim)
        with run_gateway(config, env=ENV) as a, run_gateway(config, env=ENV) as b:
            assert _chat(a.url, "fast", 4) == [200] * 4
            assert _chat(a.url, "fast", 2, stream=True) == [200] * 2
            assert _chat(a.url, "broken", 1) == [502]
            assert _chat(b.url, "fast", 3) == [200] * 3
            assert _chat(b.url, "fast", 1, stream=True) == [200]
            want = {("fast", "2xx"): 10, ("broken", "5xx"): 1}
            history = _wait_counts(b.url, want, FLUSH_S * 2 + 5)   # A's counts, read through B
            assert _counts(history) == want
            assert len(history["minutes"]) == 60 and len(history["seconds"]) == 60
            fast = [t for t in history["ttft"] if t["model"] == "fast"]
            assert fast and any(v is not None and v > 0 for v in fast[0]["p95_s"])
            assert any(v is not None for t in history["tpot"] for v in t["p95_s"])
            spend = {t["team"]: t["spent_today_usd"] for t in history["spend"]}
            assert max(v for v in spend["test"] if v is not None) > 0
            assert history["slo"] == {"ttft_s": 0.45, "tpot_s": 0.04}
        # Both stopped (each wrote its last counts on the way out); a new one sees the hour.
        with run_gateway(config, env=ENV) as c:
            history = _history(c.url, minutes=5).json()
            assert _counts(history) == want and len(history["minutes"]) == 5
        store = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        minute = history["minutes"][-1]
        ttl = max(store.ttl(minute_key(config["budget"]["key_prefix"], m))
                  for m in history["minutes"])
        store.close()
        assert 0 < ttl <= 65 * 60, (minute, ttl)


def test_bad_requests_and_history_off() -> None:
    with run_simulator() as sim:
        config = base_config(sim)
        with run_gateway(config, env=ENV) as gw:
            for minutes in (0, -1, "x"):
                r = _history(gw.url, minutes=minutes)
                assert r.status_code in (400, 422) and r.json()["error"]["param"], r.text
            # More than is kept (the page asks for 60 whatever is kept): what is kept.
            assert len(_history(gw.url, minutes=61).json()["minutes"]) == 60
            assert httpx.get(gw.url + "/admin/history").status_code == 401
            wrong = {"authorization": f"Bearer {TEST_KEY}"}
            assert httpx.get(gw.url + "/admin/history", headers=wrong).status_code in (401, 403)
        with run_gateway({**config, "metrics": {"history_minutes": 0}}, env=ENV) as gw:
            r = _history(gw.url)
            assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


def _just_after_a_write() -> None:
    """Sleep to about a second past a write slot's start, so what follows fits in one slot."""
    time.sleep((1.0 - time.time() % FLUSH_S) % FLUSH_S)


def test_counts_wait_out_a_redis_outage(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server, run_simulator() as sim:
        config = base_config(sim, redis_url=server.url)
        with run_gateway(config, env=ENV) as gw:
            _just_after_a_write()
            assert _chat(gw.url, "fast", 5) == [200] * 5
            server.kill()                    # before the slot's write
            time.sleep(FLUSH_S + 1)          # that write fails
            server.start()
            history = _wait_counts(gw.url, {("fast", "2xx"): 5}, FLUSH_S * 2 + 5)
            assert _counts(history) == {("fast", "2xx"): 5}
            assert "history.write_failed" in gw.log()


def test_what_caches_saved_and_what_cache_writes_cost_reach_the_hour() -> None:
    """A request's prefix-cache saving and its cache writes' premium, observed by a
    worker's metrics, are the history fields it writes, and the hour shows both."""
    metrics = Metrics(GatewayConfig.model_validate({"models": [
        {"name": "m", "backend": "openai_compat", "base_url": "http://127.0.0.1:9",
         "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}]}))
    metrics.observe(Outcome("r1", team="t", model="m", cache_saved_usd=0.25))
    metrics.observe(Outcome("r2", team="t", model="m", cache_write_premium_usd=0.0625))
    metrics.flush()
    fields = counted(metrics.registry.collect())
    assert fields[b'["v","prefix"]'] == 0.25 and fields[b'["w"]'] == 0.0625

    async def hour() -> dict:
        store = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        prefix = f"test-history-cache-{time.time_ns()}"
        now = time.time()
        key = minute_key(prefix, int(now // 60) * 60)
        try:
            await store.hset(key, mapping={k: str(v) for k, v in fields.items()})
            return await read_history(store, prefix, 2, 0.45, 0.04, now)
        finally:
            await store.delete(key)
            await store.aclose()

    history = asyncio.run(hour())
    assert history["cache_saved_usd"] == [{"cache": "prefix", "usd": [0.0, 0.25]}]
    assert history["cache_write_premium_usd"] == [0.0, 0.0625]
