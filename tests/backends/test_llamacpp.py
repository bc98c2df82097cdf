"""The openai_compat backend against a real inference server: llama.cpp (Gemma 3 270M).

The gateway runs as a process with one model, ``gemma``, whose upstream is
llama.cpp's own HTTP server; the client is the official SDK. The model is a
small base model, so these tests use temperature 0 and a few tokens, and
never look at the prose.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support import TEST_KEY, Gateway, hashed, run_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello in five words."}]
MAX_TOKENS = 6   # a base model rambles: a few tokens are enough to test the wire


@pytest.fixture(scope="module")
def gateway(llamacpp_url: str) -> Iterator[Gateway]:
    config = {
        "models": [{"name": "gemma", "backend": "openai_compat", "base_url": llamacpp_url,
                    "upstream_model": "gemma-3-270m", "context_window": 2048,
                    "max_output_tokens": 512,
                    "price": {"input_per_mtok": 0.01, "output_per_mtok": 0.02},
                    "timeouts": {"first_byte_s": 120, "between_chunks_s": 30}}],
        "teams": [{"name": "test", "keys": [hashed(TEST_KEY)]}],
        "redis_url": "redis://127.0.0.1:6379/0",
        "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
    }
    with run_gateway(config) as gw:
        yield gw


@pytest.fixture
def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0, timeout=60)


def test_non_streaming_completion_has_usage_and_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gemma", messages=HELLO, temperature=0,
        max_tokens=MAX_TOKENS)
    completion = raw.parse()
    assert raw.headers["x-routegate-model"] == "gemma"
    assert raw.headers["x-request-id"]
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert 0 < completion.usage.completion_tokens <= MAX_TOKENS
    assert completion.usage.prompt_tokens > 5


def test_streaming_chunks_end_cleanly(client: openai.OpenAI) -> None:
    with client.chat.completions.with_streaming_response.create(
            model="gemma", messages=HELLO, stream=True, temperature=0,
        max_tokens=MAX_TOKENS) as response:
        assert response.headers["x-routegate-model"] == "gemma"
        chunks = list(response.parse())
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    # The gateway always asks llama.cpp for usage; this client did not.
    assert all(c.usage is None for c in chunks), "usage chunk leaked to a client that did not ask"


def test_raw_stream_ends_with_done(gateway: Gateway) -> None:
    body = {"model": "gemma", "messages": HELLO, "stream": True, "temperature": 0,
            "max_tokens": MAX_TOKENS}
    r = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=60,
                   headers={"authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 200
    events = [e for e in r.text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    assert json.loads(events[0][6:])["object"] == "chat.completion.chunk"


def test_streamed_usage_when_asked_matches_the_completion(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model="gemma", messages=HELLO, stream=True, stream_options={"include_usage": True},
        temperature=0, max_tokens=MAX_TOKENS))
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None
    assert [c for c in chunks if c.usage is not None] == [final]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # At temperature 0 the same request gives the same tokens without streaming.
    whole = client.chat.completions.create(model="gemma", messages=HELLO, temperature=0,
        max_tokens=MAX_TOKENS)
    assert streamed == whole.choices[0].message.content
    assert whole.usage is not None
    assert final.usage.completion_tokens == whole.usage.completion_tokens
    assert final.usage.prompt_tokens == whole.usage.prompt_tokens


def test_logprobs_pass_through(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="gemma", messages=HELLO, logprobs=True,
                                                top_logprobs=2, temperature=0,
        max_tokens=MAX_TOKENS)
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None and completion.usage is not None
    content = logprobs.content
    assert len(content) == completion.usage.completion_tokens
    assert all(len(token.top_logprobs) == 2 for token in content)
    assert all(token.logprob <= 0 for token in content)


def test_streamed_logprobs_pass_through(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model="gemma", messages=HELLO, logprobs=True, top_logprobs=2, stream=True, temperature=0,
        max_tokens=MAX_TOKENS))
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs
              for t in c.choices[0].logprobs.content or []]
    assert tokens
    assert all(len(t.top_logprobs) == 2 for t in tokens)


def test_json_schema_is_honoured(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    completion = client.chat.completions.create(
        model="gemma", messages=[{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
        temperature=0, max_tokens=16,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "answer", "strict": True, "schema": schema}})
    content = completion.choices[0].message.content
    assert content is not None
    answer = json.loads(content)
    assert isinstance(answer["ok"], bool)
    assert set(answer) == {"ok"}


def test_upstream_400_is_passed_on_as_openai_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gemma", messages=HELLO, n=2, temperature=0,
        max_tokens=MAX_TOKENS)
    err = caught.value
    assert err.status_code == 400
    assert isinstance(err.body, dict) and err.body.get("message")
    assert "gemma" in err.body["message"]
    assert "127.0.0.1" not in err.body["message"], "the upstream URL must not leak"


def test_auto_routes_to_the_only_model(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO, temperature=0,
        max_tokens=MAX_TOKENS)
    assert raw.headers["x-routegate-model"] == "gemma"
    usage = raw.parse().usage
    assert usage is not None and usage.completion_tokens > 0


def test_truncated_json_from_the_real_model_escalates(llamacpp_url: str) -> None:
    """The tiny base model runs JSON mode on to max_tokens: truncated, invalid
    JSON. Routed first to it (the cheapest), the request climbs to the next
    model and the client gets a valid JSON object; both attempts are billed."""
    config = {
        "models": [
            {"name": "gemma", "backend": "openai_compat", "base_url": llamacpp_url,
             "upstream_model": "gemma-3-270m", "context_window": 2048, "ability": 0.4,
             "max_output_tokens": 512, "price": {"input_per_mtok": 0.01, "output_per_mtok": 0.02},
             "timeouts": {"first_byte_s": 120, "total_s": 120}},
            {"name": "sim-medium", "backend": "simulated", "ability": 0.7,
             "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
             "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000}}],
        "teams": [{"name": "test", "keys": [hashed(TEST_KEY)]}],
        "routing": {"auto_policy": "cheapest"},
        "redis_url": "redis://127.0.0.1:6379/0",
        "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
    }
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=120)
        raw = client.chat.completions.with_raw_response.create(
            model="auto", temperature=0, max_tokens=12, response_format={"type": "json_object"},
            messages=[{"role": "user", "content": "Reply with a JSON object with a key 'a'."}])
        answer = raw.parse()
        assert raw.headers["x-routegate-attempts"].startswith("gemma:")
        assert raw.headers["x-routegate-attempts"].endswith(",sim-medium:ok")
        assert raw.headers["x-routegate-model"] == "sim-medium"
        assert isinstance(json.loads(answer.choices[0].message.content or ""), dict)
        ledger = httpx.get(gw.base_url + "/usage",
                           headers={"authorization": f"Bearer {TEST_KEY}"}).json()["ledger"]
        assert {row["model"] for row in ledger} == {"gemma", "sim-medium"}
