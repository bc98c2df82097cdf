"""Bulk data off the money path: quotas, a Redis of its own, and a budget Redis that fills up.

Stored responses count against per-team quotas, and with ``storage.redis_url``
they live in a Redis apart from the spend counters. A budget Redis at its
``maxmemory`` never turns into 500s, and one that would evict keys is named
(and, under fail_closed, refused) before the gateway serves a request.
Every Redis here is a real redis-server on loopback.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import redis
import yaml

from tests.budget.servers import RedisServer
from tests.support import REPO, TEST_KEY, Gateway, base_config, child_env, run_gateway

AUTH = {"authorization": f"Bearer {TEST_KEY}"}


def respond(gw: Gateway, store: bool = True) -> httpx.Response:
    return httpx.post(gw.base_url + "/responses", headers=AUTH, timeout=30,
                      json={"model": "fast", "input": "Say hi.", "max_output_tokens": 8,
                            "store": store})


def spent(gw: Gateway) -> int:
    return int(httpx.get(gw.base_url + "/usage", headers=AUTH).json()["spent_today_nanousd"])


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("storage-redis")) as server:
        yield server


def test_a_full_stored_response_quota_is_refused_without_touching_the_budget(
        sim_url: str, storage: RedisServer) -> None:
    config = base_config(sim_url, storage={"redis_url": storage.url},
                         responses={"max_team_count": 3})
    prefix = config["budget"]["key_prefix"]
    bulk = redis.Redis.from_url(storage.url, decode_responses=True)
    budget = redis.Redis.from_url(config["redis_url"], decode_responses=True)
    with run_gateway(config) as gw:
        stored = [respond(gw).json() for _ in range(3)]
        assert [r["store"] for r in stored] == [True] * 3
        over = respond(gw).json()               # the save script refuses the fourth
        assert over["store"] is False
        before = spent(gw)
        refused = respond(gw)                   # then the team is known full: refused unrun
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("stored_responses_quota", "insufficient_quota")
        assert refused.headers["x-should-retry"] == "false"
        assert spent(gw) == before              # nothing reserved, nothing billed
        assert respond(gw, store=False).status_code == 200     # store: false still runs
        # The records are in the storage Redis, none in the budget's.
        assert len(bulk.keys(f"{{{prefix}:test}}:resp:resp_*")) == 3
        assert not budget.keys(f"{{{prefix}:test}}:resp:*")
        r = httpx.delete(gw.base_url + f"/responses/{stored[0]['id']}", headers=AUTH)
        assert r.status_code == 200
        assert respond(gw).json()["store"] is True      # room again


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction") as server:
        yield server


def fill(url: str) -> redis.Redis:
    """Write junk until Redis refuses even small writes with OOM. The client stays
    connected: closing it frees its buffers, a little room again."""
    client = redis.Redis.from_url(url)
    n = 0
    for size in (65536, 1024, 64):
        try:
            while n < 100_000:
                client.set(f"junk:{n}", b"x" * size)
                n += 1
        except redis.exceptions.OutOfMemoryError:
            continue
    assert n > 0
    # Within half a second Redis gives its clients' buffers back (48k here), room for
    # hundreds of small writes again: a CI run once served all 30 requests. So the limit
    # goes under what the junk holds, and writes stay refused until it is flushed.
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used - 512 * 1024)
    return client


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open"])
def test_a_budget_redis_at_maxmemory_is_an_outage_never_a_500(
        sim_url: str, full_redis: RedisServer, policy: str) -> None:
    config = base_config(sim_url, redis_url=full_redis.url)
    config["budget"]["fail_policy"] = policy
    config["budget"]["fail_open_usd_per_replica"] = 0.001
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.01}
    with run_gateway(config) as gw:
        body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        assert httpx.post(gw.base_url + "/chat/completions", json=body, headers=AUTH,
                          timeout=30).status_code == 200
        filler = fill(full_redis.url)
        statuses = [httpx.post(gw.base_url + "/chat/completions", json=body, headers=AUTH,
                               timeout=30).status_code for _ in range(30)]
        assert 500 not in statuses
        if policy == "fail_closed":
            assert 503 in statuses and set(statuses) <= {200, 503}
        else:                  # a small allowance from memory, never past the hard limit
            assert set(statuses) <= {200, 429}
        filler.flushdb()
        deadline = time.monotonic() + 10
        while httpx.post(gw.base_url + "/chat/completions", json=body, headers=AUTH,
                         timeout=30).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # What was served meanwhile is journalled and replayed: within the hard limit.
        time.sleep(2)
        assert 0 < spent(gw) <= 10_000_000


def serve_once(config: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "routegate.yaml"
    path.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"), **config}))
    return subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path),
                           "--port", "1"], env=child_env(), cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_an_evicting_budget_redis_is_named_and_refused_under_fail_closed(
        sim_url: str, tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", "--maxmemory", "64mb",
                     "--maxmemory-policy", "allkeys-lru") as server:
        config = base_config(sim_url, redis_url=server.url)
        refused = serve_once(config, tmp_path)
        assert refused.returncode != 0
        assert "maxmemory-policy allkeys-lru" in refused.stdout + refused.stderr
        path = tmp_path / "routegate.yaml"
        checked = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                                 env=child_env(), cwd=REPO, capture_output=True, text=True,
                                 timeout=60)
        assert checked.returncode == 0
        assert "allkeys-lru" in checked.stdout and "refuses to start" in checked.stdout
        config["budget"]["allow_evicting_redis"] = True
        with run_gateway(config) as gw:
            assert httpx.get(gw.url + "/healthz").status_code == 200
            assert "maxmemory-policy allkeys-lru" in gw.log()


def test_a_large_body_from_a_team_past_its_limit_is_refused_unread(sim_url: str) -> None:
    config = base_config(sim_url, max_body_bytes=16 * 1024 * 1024)
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.0}
    blocks = [{"type": "text", "text": "ab"}] * 200_000
    raw = orjson.dumps({"model": "fast", "max_tokens": 5,
                        "messages": [{"role": "user", "content": blocks}]})
    with run_gateway(config) as gw:
        started = time.perf_counter()
        r = httpx.post(gw.base_url + "/chat/completions", content=raw, timeout=30,
                       headers={**AUTH, "content-type": "application/json"})
        took = time.perf_counter() - started
        assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota"
        assert took < 1.0, took
        # Within its budget, the same body is bounded by its shape, unparsed.
        other = base_config(sim_url, max_body_bytes=16 * 1024 * 1024)
        other["budget"]["key_prefix"] = f"rgtest-{uuid.uuid4().hex[:8]}"
    with run_gateway(other) as gw:
        r = httpx.post(gw.base_url + "/chat/completions", content=raw, timeout=30,
                       headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_parts"
