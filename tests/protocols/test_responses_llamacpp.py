"""``/v1/responses`` in front of a real inference server: llama.cpp (Gemma 3 270M).

A base model that mostly runs on to its token limit: these tests assert the
shapes, the usage and the money, never the prose.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY, Gateway, run_gateway
from tests.upstreams.llamacpp import gemma_config

PRICE_IN, PRICE_OUT = 0.5, 1.0
MAX_OUTPUT = 8


@pytest.fixture(scope="module")
def gemma_gateway(llamacpp_url: str) -> Iterator[Gateway]:
    with run_gateway(gemma_config(llamacpp_url, PRICE_IN, PRICE_OUT)) as gw:
        yield gw


@pytest.fixture
def gemma(gemma_gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gemma_gateway.base_url, api_key=TEST_KEY, max_retries=0,
                         timeout=120)


def spent(gw: Gateway) -> int:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=10)
    return r.json()["spent_today_nanousd"]


def wait_for_spend(gw: Gateway, expected: int) -> int:
    stop = time.monotonic() + 5
    while (value := spent(gw)) != expected and time.monotonic() < stop:
        time.sleep(0.05)
    return value


def cost(usage: openai.types.responses.ResponseUsage) -> int:
    return cost_nanousd(usage.input_tokens, usage.output_tokens, PRICE_IN, PRICE_OUT)


def test_a_real_model_answers_in_the_responses_shape(gemma: openai.OpenAI,
                                                     gemma_gateway: Gateway) -> None:
    before = spent(gemma_gateway)
    response = gemma.responses.create(model="gemma", instructions="You are terse.",
                                      input="Name a color.", max_output_tokens=MAX_OUTPUT,
                                      temperature=0)
    assert response.status in ("completed", "incomplete")
    if response.status == "incomplete":           # a base model usually runs on to its limit
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
    (message,) = response.output
    assert message.type == "message" and message.content[0].type == "output_text"
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and 0 < usage.output_tokens <= MAX_OUTPUT
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert wait_for_spend(gemma_gateway, before + cost(usage)) - before == cost(usage)


def test_a_real_model_streams_openais_events(gemma: openai.OpenAI, gemma_gateway: Gateway) -> None:
    before = spent(gemma_gateway)
    with gemma.responses.stream(model="gemma", input="Count: one, two,",
                                max_output_tokens=MAX_OUTPUT, temperature=0) as stream:
        events = list(stream)
    last = events[-1]
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert last.type in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = last.response
    first = final.output[0]
    assert first.type == "message"
    text = first.content[0]
    assert text.type == "output_text"
    assert text.text == deltas
    assert [e.sequence_number for e in events] == list(range(len(events)))
    usage = final.usage
    assert usage is not None and 0 < usage.output_tokens <= MAX_OUTPUT
    assert wait_for_spend(gemma_gateway, before + cost(usage)) - before == cost(usage)
