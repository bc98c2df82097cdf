"""``/v1/responses`` and money: billed exactly what the response says, refused past the limit.

Also what stored responses cost in Redis: a TTL on every record, and a size
bound past which a response is answered but not stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY, Gateway, base_config, run_gateway

PRICE_IN, PRICE_OUT = 0.2, 0.4            # the "fast" model of base_config
HARD_USD = 0.00005                        # a few short answers, then refused
TTL_S = 3600
MAX_STORED = 4096
ROOM = 200                                # the simulator's answers end well before


@pytest.fixture(scope="module")
def money_gateway(sim_url: str) -> Iterator[Gateway]:
    config = base_config(sim_url, responses={"store_ttl_s": TTL_S, "max_stored_bytes": MAX_STORED})
    with run_gateway(config) as gw:
        yield gw


@pytest.fixture(scope="module")
def limited_gateway(sim_url: str) -> Iterator[Gateway]:
    config = base_config(sim_url)
    config["teams"][0]["budget"] = {"daily_hard_usd": HARD_USD}
    # One model only: a request reserves the dearest rung it may fall back to, and
    # base_config's fault models cost 50 $/Mtok.
    config["teams"][0]["allowed_models"] = ["fast"]
    with run_gateway(config) as gw:
        yield gw


def client_of(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)


def spent(gw: Gateway) -> int:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["spent_today_nanousd"]


def settled_spend(gw: Gateway, expected: int, deadline_s: float = 5.0) -> int:
    """The team's spend once the last settle landed (it runs after the answer is sent)."""
    stop = time.monotonic() + deadline_s
    value = spent(gw)
    while value != expected and time.monotonic() < stop:
        time.sleep(0.05)
        value = spent(gw)
    return value


def cost(usage: Any) -> int:
    return cost_nanousd(usage.input_tokens, usage.output_tokens, PRICE_IN, PRICE_OUT)


def test_spend_is_exactly_the_price_of_the_usage_shown(money_gateway: Gateway) -> None:
    client = client_of(money_gateway)
    before = spent(money_gateway)
    expected = 0
    for i in range(3):
        response = client.responses.create(model="fast", input=f"Question {i}?", max_output_tokens=ROOM)
        expected += cost(response.usage)
    with client.responses.stream(model="fast", input="Streamed?", max_output_tokens=ROOM) as stream:
        expected += cost(stream.get_final_response().usage)
    events = list(client.responses.create(model="fast", input="Raw stream?", stream=True,
                                          max_output_tokens=ROOM))
    expected += cost(events[-1].response.usage)          # type: ignore[union-attr]
    assert expected > 0
    assert settled_spend(money_gateway, before + expected) - before == expected


def test_past_the_hard_limit_is_a_429_insufficient_quota(limited_gateway: Gateway) -> None:
    client = client_of(limited_gateway)
    served = 0
    for _ in range(30):
        try:
            client.responses.create(model="fast", input="Short answer, please.", max_output_tokens=16)
        except openai.RateLimitError as refused:
            error = refused
            break
        served += 1
    else:
        pytest.fail("the hard limit never refused a request")
    assert served > 0, "the very first request was refused: the limit is too small to test with"
    expected = {"type": "insufficient_quota", "code": "insufficient_quota", "param": None}
    assert error.status_code == 429
    assert {k: error.body[k] for k in expected} == expected          # type: ignore[index]
    assert error.body["message"]                                     # type: ignore[index]
    # The same request, streamed: its worst case is what was just refused (a
    # shorter prompt's smaller reservation could still fit the headroom left).
    with pytest.raises(openai.RateLimitError) as streamed:
        for _ in client.responses.create(model="fast", input="Short answer, please.",
                                         stream=True, max_output_tokens=16):
            pass
    assert {k: streamed.value.body[k] for k in expected} == expected  # type: ignore[index]
    assert spent(limited_gateway) <= HARD_USD * 1e9


def stored_key(gw: Gateway, response_id: str) -> str:
    import yaml

    prefix = yaml.safe_load(gw.config_path.read_text())["budget"]["key_prefix"]
    return f"{{{prefix}:test}}:resp:{response_id}"


def test_stored_responses_live_in_redis_under_the_team_with_a_ttl(money_gateway: Gateway) -> None:
    response = client_of(money_gateway).responses.create(model="fast", input="Keep me.")
    r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        ttl = r.ttl(stored_key(money_gateway, response.id))
    finally:
        r.close()
    assert TTL_S - 60 <= ttl <= TTL_S


def test_a_response_over_the_size_bound_is_answered_but_not_stored(money_gateway: Gateway) -> None:
    client = client_of(money_gateway)
    big = client.responses.create(model="echo", input="x" * MAX_STORED)   # echoed back whole
    assert len(big.output_text) > MAX_STORED
    assert big.model_extra and big.model_extra["store"] is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(big.id)
    small = client.responses.create(model="echo", input="x")
    assert small.model_extra and small.model_extra["store"] is True
    assert client.responses.retrieve(small.id).output_text == small.output_text
