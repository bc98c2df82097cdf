"""Issue 20, item 11: reservations hold what a real upstream bills, and stay tight.

llama.cpp counts a prompt with Gemma's tokenizer and wraps every message in
its chat template, so its ``prompt_tokens`` are not our ``o200k_base``
count. The gateway learns each model's count (``PromptMeter``); its
reservation must never undershoot what the upstream then bills, and should
not overshoot it by much once learned.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from budget.nanousd import cost_nanousd
from classifiers.length import counter_for
from gateway.money.prompt_meter import SLACK, PromptMeter
from tests.support import TEST_KEY, Gateway, run_gateway
from tests.upstreams.llamacpp import gemma_config

PROSE: list[list[ChatCompletionMessageParam]] = [
    [{"role": "user", "content": "Hi."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}],
    [{"role": "user", "content": "Summarise: " + "the quick brown fox jumps over the lazy dog. " * 12}],
    [{"role": "user", "content": "Two plus two?"}, {"role": "assistant", "content": "Four."},
     {"role": "user", "content": "And three plus three?"}],
    [{"role": "user", "content": "Écris une phrase en français sur la mer et le vent du nord."}],
    [{"role": "system", "content": "Answer in JSON."},
     {"role": "user", "content": "List three prime numbers, " * 5}],
]
# Where Gemma's tokenizer counts more than o200k_base: code (+15%), digits (twice ours).
DENSE: list[list[ChatCompletionMessageParam]] = [
    [{"role": "user", "content": "def f(x):\n    return [i**2 for i in range(x) if i % 3 == 0]\n" * 3}],
    [{"role": "user", "content": "3.14159265358979 2.71828182845904 1.41421356237309 " * 4}],
]
PROMPTS = PROSE + DENSE
ROUNDS = 2           # every prompt twice: 12 answers, past the meter's 8 before it trusts its fit
PRICE_IN, PRICE_OUT = 0.5, 1.0


@pytest.fixture(scope="module")
def gateway(llamacpp_url: str) -> Iterator[Gateway]:
    with run_gateway(gemma_config(llamacpp_url, PRICE_IN, PRICE_OUT)) as gw:
        yield gw


def test_the_real_upstream_is_billed_exactly_and_never_above_its_reservation(
        gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0,
                           timeout=120)
    counter = counter_for("o200k_base")
    samples: list[tuple[int, int, int]] = []     # (ours, messages, llama.cpp's prompt_tokens)
    billed_in = billed_out = cost = 0
    for _ in range(ROUNDS):
        for messages in PROMPTS:
            answer = client.chat.completions.create(model="gemma", messages=messages,
                                                    max_tokens=4, temperature=0)
            assert answer.usage is not None
            samples.append((counter.count_messages(messages), len(messages),
                            answer.usage.prompt_tokens))
            billed_in += answer.usage.prompt_tokens
            billed_out += answer.usage.completion_tokens
            cost += cost_nanousd(answer.usage.prompt_tokens, answer.usage.completion_tokens,
                                 PRICE_IN, PRICE_OUT)
    # llama.cpp counts more than we do on some: the case whose reservation undershot.
    assert any(reported > 1.5 * ours for ours, _, reported in samples)
    report = httpx.get(gateway.base_url + "/usage",
                       headers={"authorization": f"Bearer {TEST_KEY}"}).json()
    (row,) = report["ledger"]
    assert (row["requests"], row["input_tokens"], row["output_tokens"]) == (
        len(samples), billed_in, billed_out)          # billed as the upstream reported, exactly
    assert report["spent_today_nanousd"] == row["cost_nanousd"] == cost
    deadline = time.monotonic() + 5
    while True:   # the last request's log line is written after its answer
        log = gateway.log()
        events = [json.loads(line[line.index("{"):]) for line in log.splitlines()
                  if "request.completed" in line]
        if len(events) >= len(samples) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "above its reserved worst case" not in log
    assert len(events) == len(samples)
    assert not [e for e in events if e.get("usage_anomaly")]


def _real_counts(gateway: Gateway, prompts: list[list[ChatCompletionMessageParam]]
                 ) -> list[tuple[int, int, int]]:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0,
                           timeout=120)
    counter, out = counter_for("o200k_base"), []
    for messages in prompts:
        answer = client.chat.completions.create(model="gemma", messages=messages, max_tokens=1,
                                                temperature=0)
        assert answer.usage is not None
        out.append((counter.count_messages(messages), len(messages), answer.usage.prompt_tokens))
    return out


def test_the_learned_bound_is_honest_and_tight_on_llamacpp_counts(gateway: Gateway) -> None:
    """The meter itself, fed llama.cpp's real counts. On prose it is never below
    the real count, and once learned within the margin (25%) and the slack of it."""
    meter = PromptMeter(margin=0.25)
    for ours, messages, reported in _real_counts(gateway, PROSE * ROUNDS):
        bound = meter.bound(ours, messages)
        assert bound >= reported, (ours, reported, bound)
        if meter.learned:
            assert bound <= 1.25 * reported + 2 * SLACK, (ours, reported, bound)
        meter.observe(ours, messages, reported)
    assert meter.learned


def test_the_bound_stays_honest_when_traffic_counts_twice_ours(gateway: Gateway) -> None:
    """Digits count twice ours on Gemma: cold, and then learned with the spread, the
    bound holds every real count of a mixed stream of prompts."""
    meter = PromptMeter(margin=0.25)
    for ours, messages, reported in _real_counts(gateway, (DENSE + PROSE) * ROUNDS):
        assert meter.bound(ours, messages) >= reported, (ours, reported)
        meter.observe(ours, messages, reported)
    assert meter.learned and meter.spread > 1.5


def test_a_repeated_system_prompt_is_read_from_llamacpps_cache_and_billed_so(
        llamacpp_url: str) -> None:
    """llama.cpp keeps a slot's prompt: the same long system prompt sent again is
    reported as ``cached_tokens``, billed at the cached price to the nano-dollar
    against its own usage, and its prefill (TTFT) is shorter."""
    price_cached = 0.05
    config = gemma_config(llamacpp_url, PRICE_IN, PRICE_OUT,
                          price={"input_per_mtok": PRICE_IN, "output_per_mtok": PRICE_OUT,
                                 "cached_input_per_mtok": price_cached})
    system = f"House rules, version {time.time_ns()}. " + "Be brief and polite. " * 120
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0,
                               timeout=120)
        shown: list[Any] = []
        ttfts: list[float | None] = []
        for question in ("Name a colour.", "Name a fruit."):
            started = time.perf_counter()
            first = None
            for chunk in client.chat.completions.create(
                    model="gemma", max_tokens=4, temperature=0, stream=True,
                    stream_options={"include_usage": True},
                    messages=[{"role": "system", "content": system},
                              {"role": "user", "content": question}]):
                if first is None and chunk.choices:
                    first = time.perf_counter() - started
                if chunk.usage is not None:
                    shown.append(chunk.usage)
            ttfts.append(first)
        time.sleep(0.5)
        book = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"}
                         ).json()
    cached = [(u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0) or 0
              for u in shown]
    print(f"\nllama.cpp: prompt {[u.prompt_tokens for u in shown]}, cached {cached}, "
          f"TTFT {[round(t * 1000) for t in ttfts if t]} ms")
    assert cached[0] < shown[0].prompt_tokens // 4 and cached[1] > shown[1].prompt_tokens // 2
    expected = sum(cost_nanousd(u.prompt_tokens - c, u.completion_tokens, PRICE_IN, PRICE_OUT, c,
                                price_cached) for u, c in zip(shown, cached, strict=True))
    assert int(book["spent_today_nanousd"]) == expected
    row = book["ledger"][0]
    assert row["cached_tokens"] == sum(cached)
    assert ttfts[1] is not None and ttfts[0] is not None and ttfts[1] < ttfts[0]
