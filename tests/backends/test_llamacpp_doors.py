"""Issue 18: the real llama.cpp server behind ``/v1/completions`` and ``/v1/embeddings``.

llama.cpp serves both (embeddings with mean pooling, ``tests/upstreams/llamacpp.py``);
the gateway routes a legacy completion like chat, an embedding by name, and
bills each exactly as the server reported. A base model: shapes and usage
are asserted, never the prose.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY, Gateway, run_gateway
from tests.upstreams.llamacpp import gemma_config

PRICE_IN, PRICE_OUT = 0.5, 1.0


@pytest.fixture(scope="module")
def gateway(llamacpp_url: str) -> Iterator[Gateway]:
    config = gemma_config(llamacpp_url, PRICE_IN, PRICE_OUT, aliases=["gpt-3.5-turbo-instruct"])
    embed = {**config["models"][0], "name": "gemma-embed", "kind": "embedding",
             "max_output_tokens": 1, "aliases": ["text-embedding-3-small"],
             "price": {"input_per_mtok": PRICE_IN, "output_per_mtok": 0}}
    config["models"].append(embed)
    with run_gateway(config) as gw:
        yield gw


def spent(gw: Gateway) -> int:
    return httpx.get(gw.base_url + "/usage",
                     headers={"authorization": f"Bearer {TEST_KEY}"}).json()["spent_today_nanousd"]


def test_completions_plain_and_streamed_from_llamacpp(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0,
                           timeout=120)
    before = spent(gateway)
    answer = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Once upon a time",
                                       max_tokens=6, temperature=0)
    assert answer.object == "text_completion" and answer.choices[0].text
    assert answer.choices[0].finish_reason in ("length", "stop")
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 6
    chunks = list(client.completions.create(model="gemma", prompt="The sky is", max_tokens=6,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    streamed = next(c.usage for c in reversed(chunks) if c.usage is not None)
    assert 0 < streamed.completion_tokens <= 6
    assert spent(gateway) - before == (
        cost_nanousd(answer.usage.prompt_tokens, answer.usage.completion_tokens, PRICE_IN,
                     PRICE_OUT)
        + cost_nanousd(streamed.prompt_tokens, streamed.completion_tokens, PRICE_IN, PRICE_OUT))


def test_embeddings_from_llamacpp(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0,
                           timeout=120)
    before = spent(gateway)
    result = client.embeddings.create(model="text-embedding-3-small",
                                      input=["a cost-aware gateway", "a model router"])
    assert len(result.data) == 2
    assert len(result.data[0].embedding) == len(result.data[1].embedding) > 100   # Gemma: 640
    assert result.data[0].embedding != result.data[1].embedding
    assert result.usage.prompt_tokens > 0
    assert spent(gateway) - before == cost_nanousd(result.usage.prompt_tokens, 0, PRICE_IN, 0)
