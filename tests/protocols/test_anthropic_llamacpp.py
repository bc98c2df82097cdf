"""``POST /v1/messages`` in front of a real inference server: llama.cpp with Gemma 3 270M.

A base-sized model, so the prose is not asserted: the shapes, the stop
reasons, the usage, and that the team is billed exactly the usage each
message reports. Skips (saying why) when xllamacpp or the model package is
not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY, Gateway, run_gateway
from tests.upstreams.llamacpp import gemma_config

PRICE_IN, PRICE_OUT = 0.5, 1.0
ASK: dict[str, Any] = {"model": "gemma", "max_tokens": 12, "system": "Answer in one short sentence.",
                       "messages": [{"role": "user", "content": "What colour is the sky?"}]}


@pytest.fixture(scope="module")
def gw(llamacpp_url: str) -> Iterator[Gateway]:
    with run_gateway(gemma_config(llamacpp_url, PRICE_IN, PRICE_OUT)) as gateway:
        yield gateway


def spent(gw: Gateway) -> int:
    reply = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"})
    return int(reply.json()["spent_today_nanousd"])


def check_shape(message: anthropic.types.Message) -> None:
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == "gemma"   # the configured name
    assert all(block.type == "text" for block in message.content)
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 12
    if message.stop_reason == "max_tokens":
        assert message.usage.output_tokens == 12


def test_create_and_stream_against_llamacpp_bill_exactly_what_they_report(gw: Gateway) -> None:
    client = anthropic.Anthropic(base_url=gw.url, api_key=TEST_KEY, max_retries=0, timeout=150)
    before = spent(gw)
    created = client.messages.create(**ASK)
    check_shape(created)
    with client.messages.stream(**ASK) as stream:
        text = "".join(stream.text_stream)
        streamed = stream.get_final_message()
    check_shape(streamed)
    assert "".join(b.text for b in streamed.content if b.type == "text") == text
    # llama.cpp reuses its cache for the second call: Anthropic's input_tokens leave the
    # cached ones out, and this model prices them as input.
    billed = sum(cost_nanousd(m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0),
                              m.usage.output_tokens, PRICE_IN, PRICE_OUT)
                 for m in (created, streamed))
    assert spent(gw) - before == billed
