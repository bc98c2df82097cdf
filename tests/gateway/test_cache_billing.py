"""Cached prompt tokens billed at their price, by every door, against the upstream's own count.

The simulator here keeps a prefix cache as vLLM does (``sim/prefix_cache.py``)
and reports ``prompt_tokens_details.cached_tokens``. A long system prompt
sent twice is read from its cache the second time; the team is billed, to
the nano-dollar, the simulator's own figures: uncached tokens at the input
price, cached ones at ``cached_input_per_mtok``. Each door shows the client
the cached figures in its own shape.
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

from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY, Gateway, hashed, run_gateway, run_simulator

PRICE_IN, PRICE_CACHED, PRICE_OUT = 2.0, 0.2, 8.0
RULES = "Rule: answer briefly and cite the rule. " * 300


def system(name: str) -> str:
    """A long system prompt no other test sent: its first turn finds nothing cached."""
    return f"You follow the house rules of {name}. " + RULES


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "8") as url:
        yield url


@pytest.fixture(scope="module")
def gw(sim: str) -> Iterator[Gateway]:
    model = {"name": "m", "backend": "openai_compat", "base_url": sim, "upstream_model": "default",
             "price": {"input_per_mtok": PRICE_IN, "output_per_mtok": PRICE_OUT,
                       "cached_input_per_mtok": PRICE_CACHED}, "context_window": 32000}
    config = {"models": [model], "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]}],
              "redis_url": "redis://127.0.0.1:6379/0",
              "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
              "batch": {"enabled": False}}
    with run_gateway(config) as gateway:
        yield gateway


def rows_since(sim: str, seen: int) -> list[dict[str, Any]]:
    return httpx.get(sim.removesuffix("/v1") + "/sim/requests").json()[seen:]


def spent(gw: Gateway) -> int:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"})
    return int(r.json()["spent_today_nanousd"])


def honest(row: dict[str, Any]) -> int:
    cached = row["cached_tokens"]
    return cost_nanousd(row["prompt_tokens"] - cached, row["completion_tokens"], PRICE_IN,
                        PRICE_OUT, cached, PRICE_CACHED)


def settled(gw: Gateway, sim: str, before: tuple[int, int]) -> tuple[int, list[dict[str, Any]]]:
    deadline = time.monotonic() + 10
    while True:
        rows = rows_since(sim, before[1])
        now = spent(gw) - before[0]
        if now == sum(honest(r) for r in rows) or time.monotonic() > deadline:
            return now, rows
        time.sleep(0.05)


def mark(gw: Gateway, sim: str) -> tuple[int, int]:
    return spent(gw), len(rows_since(sim, 0))


@pytest.mark.parametrize("stream", [False, True])
def test_chat_bills_cached_tokens_at_the_cached_price(gw: Gateway, sim: str, stream: bool) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
    messages: Any = [{"role": "system", "content": system(f"chat-{stream}")},
                     {"role": "user", "content": f"Which rule applies? ({stream})"}]
    before = mark(gw, sim)
    shown: list[Any] = []
    for _ in range(2):
        if stream:
            chunks = list(client.chat.completions.create(
                model="m", messages=messages, max_tokens=8, stream=True,
                stream_options={"include_usage": True}))
            shown.append(chunks[-1].usage)
        else:
            shown.append(client.chat.completions.create(model="m", messages=messages,
                                                        max_tokens=8).usage)
    now, rows = settled(gw, sim, before)
    assert len(rows) == 2 and rows[0]["cached_tokens"] == 0
    assert rows[1]["cached_tokens"] > 0.9 * rows[1]["prompt_tokens"]
    assert now == honest(rows[0]) + honest(rows[1])
    details = shown[1].prompt_tokens_details if shown[1] is not None else None
    assert details is not None and details.cached_tokens == rows[1]["cached_tokens"]


def test_responses_and_messages_show_and_bill_the_cache(gw: Gateway, sim: str) -> None:
    before = mark(gw, sim)
    ask = {"model": "m", "instructions": system("responses"), "input": "Which rule, Responses?",
           "max_output_tokens": 8, "store": False}
    auth = {"authorization": f"Bearer {TEST_KEY}"}
    first = httpx.post(gw.base_url + "/responses", json=ask, headers=auth, timeout=30).json()
    second = httpx.post(gw.base_url + "/responses", json=ask, headers=auth, timeout=30).json()
    claude = anthropic.Anthropic(base_url=gw.url, api_key=TEST_KEY, max_retries=0)
    kwargs: Any = {"model": "m", "max_tokens": 8, "system": system("messages"),
                   "messages": [{"role": "user", "content": "Which rule, Messages?"}]}
    claude.messages.create(**kwargs)
    message = claude.messages.create(**kwargs)
    now, rows = settled(gw, sim, before)
    assert len(rows) == 4
    assert now == sum(honest(r) for r in rows)
    assert first["usage"]["input_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["input_tokens_details"]["cached_tokens"] == rows[1]["cached_tokens"] > 0
    usage = message.usage
    assert usage.cache_read_input_tokens == rows[3]["cached_tokens"] > 0
    assert usage.input_tokens + usage.cache_read_input_tokens == rows[3]["prompt_tokens"]
