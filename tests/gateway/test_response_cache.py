"""The response cache: a repeated deterministic request answered from Redis, no upstream call.

A team opts in (``teams[].response_cache``); the simulator's own record of
the requests it took (``GET /sim/requests``) says whether a request reached
it. A hit is billed ``hit_price_fraction`` of the original's cost; streams
replay in the door's shape; ``cache-control`` skips the lookup or the write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support import OTHER_KEY, TEST_KEY, Gateway, hashed, run_gateway, run_simulator

ASK: Any = [{"role": "user", "content": "Name the capital of Peru."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "12") as url:
        yield url


@pytest.fixture(scope="module")
def gw(sim: str) -> Iterator[Gateway]:
    model = {"name": "m", "backend": "openai_compat", "base_url": sim, "upstream_model": "default",
             "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    config = {"models": [model],
              "teams": [{"name": "t", "keys": [hashed(TEST_KEY)],
                         "response_cache": {"ttl_s": 60}},
                        {"name": "half", "keys": [hashed(OTHER_KEY)],
                         "response_cache": {"ttl_s": 60, "hit_price_fraction": 0.5}}],
              "redis_url": "redis://127.0.0.1:6379/0",
              "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
              "batch": {"enabled": False}}
    with run_gateway(config) as gateway:
        yield gateway


def upstream_calls(sim: str) -> int:
    return len(httpx.get(sim.removesuffix("/v1") + "/sim/requests").json())


def spent(gw: Gateway, key: str = TEST_KEY) -> int:
    deadline = time.monotonic() + 3
    last = -1
    while True:        # settles are queued after the answer: wait until the figure holds
        r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
        now = int(r.json()["spent_today_nanousd"])
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.2)


def chat(gw: Gateway, key: str = TEST_KEY, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model="m", messages=ASK, **{"temperature": 0, **extra})


def test_a_repeat_is_answered_from_the_cache_without_an_upstream_call(gw: Gateway,
                                                                       sim: str) -> None:
    first = chat(gw, max_tokens=12)
    assert first.headers["x-routegate-cache"] == "miss"
    calls, cost = upstream_calls(sim), spent(gw)
    second = chat(gw, max_tokens=12)
    assert second.headers["x-routegate-cache"] == "hit"
    assert upstream_calls(sim) == calls                        # nothing went upstream
    assert spent(gw) == cost                                   # billed 0: the default
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    sampled = chat(gw, max_tokens=12, temperature=0.7)        # not deterministic: not cached
    assert "x-routegate-cache" not in sampled.headers


def test_a_hit_streams_in_the_doors_shape_and_is_billed_its_fraction(gw: Gateway,
                                                                      sim: str) -> None:
    claude = anthropic.Anthropic(base_url=gw.url, api_key=OTHER_KEY, max_retries=0)
    # This SDK version has no temperature of its own: it goes as an extra field.
    kwargs: Any = {"model": "m", "max_tokens": 16, "messages": ASK,
                   "extra_body": {"temperature": 0}}
    original = claude.messages.create(**kwargs)
    cost, calls = spent(gw, OTHER_KEY), upstream_calls(sim)
    with claude.messages.stream(**kwargs) as events:
        replayed = events.get_final_message()
    assert upstream_calls(sim) == calls
    assert [b.model_dump() for b in replayed.content] == [b.model_dump() for b in original.content]
    assert spent(gw, OTHER_KEY) == cost + round(cost * 0.5)     # half of what the first cost


def test_cache_control_skips_the_lookup_or_the_write(gw: Gateway, sim: str) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
    ask: Any = [{"role": "user", "content": "Spell 'queue' backwards."}]
    client.chat.completions.create(model="m", messages=ask, seed=7,
                                   extra_headers={"cache-control": "no-store"})
    calls = upstream_calls(sim)
    again = client.chat.completions.with_raw_response.create(model="m", messages=ask, seed=7)
    assert again.headers["x-routegate-cache"] == "miss" and upstream_calls(sim) == calls + 1
    fresh = client.chat.completions.with_raw_response.create(
        model="m", messages=ask, seed=7, extra_headers={"cache-control": "no-cache"})
    assert fresh.headers["x-routegate-cache"] == "miss" and upstream_calls(sim) == calls + 2
    hit = client.chat.completions.with_raw_response.create(model="m", messages=ask, seed=7)
    assert hit.headers["x-routegate-cache"] == "hit" and upstream_calls(sim) == calls + 2
