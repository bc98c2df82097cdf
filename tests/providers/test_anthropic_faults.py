"""Anthropic's failures through a real gateway: the fallback and breaker rules of docs/api.md.

A 429 (with ``retry-after``) and a 529 ``overloaded_error`` rest the model and
fall back to the next one, as ``openai_compat`` does for a 429; so does a
stream whose first event is an ``error``. A 400 is the client's (no fallback,
no breaker), a missing key is the operator's (502 ``upstream_auth``), and a
stream that breaks after its first text ends in an error event the SDKs
raise. A Messages request that falls back to an OpenAI-compatible model goes
there in its chat form and comes back translated.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from tests.providers.anthropic_server import AnthropicServer
from tests.providers.conftest import Money
from tests.support import TEST_KEY, Gateway

ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello there."}]


def readiness(gw: Gateway) -> dict[str, str]:
    return httpx.get(gw.url + "/readyz").json()["breakers"]


@pytest.mark.parametrize("faulty, key, outcome", [
    ("throttled", "sk-anthropic-429", "rate_limit_exceeded"),
    ("overloaded", "sk-anthropic-529", "upstream_overloaded"),
])
def test_a_throttle_rests_the_model_and_falls_back(
        faulty: str, key: str, outcome: str, anthropic_gateway: Gateway,
        anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server, key)
    client = openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=key, max_retries=0)
    first = client.chat.completions.with_raw_response.create(model="auto", messages=ASK,
                                                             max_tokens=32)
    assert first.headers["x-routegate-attempts"] == f"{faulty}:{outcome},claude-b:ok"
    upstream = "claude-" + faulty
    assert [x.status for x in money.exchanges() if x.body["model"] == upstream] == [
        429 if faulty == "throttled" else 529]
    second = client.chat.completions.with_raw_response.create(model="auto", messages=ASK,
                                                              max_tokens=32)
    assert second.headers["x-routegate-model"] == "claude-b"
    assert "x-routegate-attempts" not in second.headers        # the model rests
    assert len([x for x in money.exchanges() if x.body["model"] == upstream]) == 1
    assert readiness(anthropic_gateway)[faulty] == "resting"
    assert money.breaches() == []
    spent, expected = money.settled({"claude-other": 2.0})    # the refusals cost nothing
    assert spent == expected > 0


def test_an_error_event_before_the_first_chunk_falls_back(anthropic_gateway: Gateway,
                                                          anthropic_server: AnthropicServer) -> None:
    key = "sk-anthropic-early"
    money = Money(anthropic_gateway, anthropic_server, key)
    client = openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=ASK, max_tokens=32, stream=True)
    assert raw.headers["x-routegate-attempts"] == "early-error:upstream_overloaded,claude-b:ok"
    chunks: Any = raw.parse()
    text = "".join(c.choices[0].delta.content or "" for c in chunks
                   if isinstance(c, ChatCompletionChunk) and c.choices)
    assert "Hello there." in text
    assert readiness(anthropic_gateway)["early-error"] == "resting"
    spent, expected = money.settled({"claude-other": 2.0})
    assert spent == expected > 0


def test_a_messages_request_falls_back_to_a_chat_upstream_in_its_chat_form(
        anthropic_gateway: Gateway, anthropic_server: AnthropicServer) -> None:
    key = "sk-anthropic-mixed"
    money = Money(anthropic_gateway, anthropic_server, key)
    sdk = anthropic.Anthropic(base_url=anthropic_gateway.url, api_key=key, max_retries=0)
    raw = sdk.messages.with_raw_response.create(
        model="auto", max_tokens=32, messages=[{"role": "user", "content": "Hi"}],
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
    assert raw.headers["x-routegate-attempts"] == "throttled-too:rate_limit_exceeded,sim:ok"
    message = raw.parse()
    assert message.type == "message" and message.content[0].type == "text"
    native = money.exchanges()[-1]
    assert native.status == 429 and native.body["system"][0]["cache_control"] == {
        "type": "ephemeral"}                   # the anthropic model got the client's body


def test_an_upstream_400_is_the_clients_and_no_breaker_hit(anthropic_gateway: Gateway,
                                                          anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    sdk = anthropic.Anthropic(base_url=anthropic_gateway.url, api_key=TEST_KEY, max_retries=0)
    for _ in range(6):         # more than the breaker's consecutive failures
        with pytest.raises(anthropic.BadRequestError) as refused:
            sdk.messages.create(model="claude-a", max_tokens=32, messages=[
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x",
                                              "content": "18C"}]}])
    assert "unexpected `tool_use_id` found in `tool_result` blocks" in str(refused.value)
    assert refused.value.status_code == 400
    assert {x.status for x in money.exchanges()} == {400}
    assert readiness(anthropic_gateway)["claude-a"] == "closed"
    assert money.settled() == (0, 0)


def test_a_missing_key_is_the_operators_502(anthropic_gateway: Gateway,
                                             anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    client = openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=TEST_KEY, max_retries=0)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="no-key", messages=ASK, max_tokens=8)
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "upstream_auth"          # type: ignore[index]
    assert money.exchanges()[-1].error == "authentication_error"


def test_a_stream_broken_midway_raises_in_both_sdks(anthropic_gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=TEST_KEY, max_retries=0)
    with pytest.raises(openai.APIError) as broken:
        for _ in client.chat.completions.create(model="breaks", messages=ASK,
                                                max_tokens=32, stream=True):
            pass
    assert "overloaded" in str(broken.value)
    sdk = anthropic.Anthropic(base_url=anthropic_gateway.url, api_key=TEST_KEY, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        with sdk.messages.stream(model="breaks", max_tokens=32,
                                 messages=[{"role": "user", "content": "Hi"}]) as stream:
            for _ in stream:
                pass
    assert raised.value.body["error"]["type"] == "overloaded_error"   # type: ignore[index]


def test_a_broken_stream_bills_its_prompt_as_anthropic_counted_it(
        anthropic_gateway: Gateway, anthropic_server: AnthropicServer) -> None:
    """A stream that breaks before ``message_stop`` never says its whole usage, but its
    ``message_start`` said how the prompt was read: the first call writes a long system
    prompt to the cache and the second reads it, and each is billed the cache's prices
    for it and our count of the text it sent (not the whole prompt at the input price)."""
    money = Money(anthropic_gateway, anthropic_server)
    long_system = " ".join(f"Rule {i}: answer in plain words." for i in range(300))
    chat = openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=TEST_KEY, max_retries=0)
    sdk = anthropic.Anthropic(base_url=anthropic_gateway.url, api_key=TEST_KEY, max_retries=0)
    marked: Any = [{"role": "system", "content": [{"type": "text", "text": long_system,
                                                  "cache_control": {"type": "ephemeral"}}]},
                   {"role": "user", "content": "Hello there."}]
    for _ in range(2):
        with pytest.raises(openai.APIError):
            for _ in chat.chat.completions.create(model="breaks", max_tokens=32, stream=True,
                                                  messages=marked):
                pass
    with pytest.raises(anthropic.APIStatusError):
        with sdk.messages.stream(model="breaks", max_tokens=32, messages=[
                {"role": "user", "content": "Hello there."}], system=[
                {"type": "text", "text": long_system,
                 "cache_control": {"type": "ephemeral"}}]) as stream:
            for _ in stream:
                pass
    written, read, read_again = (x.usage for x in money.exchanges())
    assert written is not None and read is not None and read_again is not None
    assert written["cache_creation_input_tokens"] > 1024 and written["cache_read_input_tokens"] == 0
    assert read["cache_read_input_tokens"] == written["cache_creation_input_tokens"]
    assert read_again["cache_read_input_tokens"] == read["cache_read_input_tokens"]
    assert min(x["output_tokens"] for x in (written, read, read_again)) > 0
    spent, expected = money.settled()
    assert spent == expected > 0
    assert money.breaches() == []
