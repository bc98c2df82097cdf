"""The openai SDK on ``/v1/chat/completions``, through a real gateway, onto ``backend: anthropic``.

Plain, streamed, a forced tool call, a tool-result round trip and
json_schema: every request reaches the Anthropic test server on-spec (its
ledger says so), the answers parse in the openai SDK, and the team's spend
equals the server's own usage at the configured prices, to the nano-dollar.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from tests.providers.anthropic_server import AnthropicServer
from tests.providers.conftest import AUTO_A_KEY, PRICE, Money
from tests.support import TEST_KEY, Gateway

ASK: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}
WEATHER: ChatCompletionToolParam = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@pytest.fixture
def client(anthropic_gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=TEST_KEY, max_retries=0,
                         timeout=30)


def test_a_plain_answer(client: openai.OpenAI, anthropic_gateway: Gateway,
                        anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    answer = client.chat.completions.create(model="claude-a", messages=ASK, max_tokens=64,
                                            temperature=0.3, stop=["NEVER"])
    assert answer.model == "claude-a" and answer.choices[0].finish_reason == "stop"
    assert "What is the weather in Paris?" in (answer.choices[0].message.content or "")
    sent = money.exchanges()[-1]
    assert sent.body["system"] == [{"type": "text", "text": "You are terse."}]
    assert sent.body["model"] == "claude-test" and sent.body["max_tokens"] == 64
    assert sent.body["temperature"] == 0.3 and sent.body["stop_sequences"] == ["NEVER"]
    assert sent.headers["anthropic-version"] == "2023-06-01"
    usage = sent.usage or {}
    assert answer.usage is not None and answer.usage.prompt_tokens == usage["input_tokens"]
    assert answer.usage.completion_tokens == usage["output_tokens"]
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0


def test_a_stream_is_billed_the_servers_usage(client: openai.OpenAI, anthropic_gateway: Gateway,
                                              anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    chunks = list(client.chat.completions.create(
        model="claude-a", messages=ASK, max_tokens=64, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "What is the weather in Paris?" in text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = money.exchanges()[-1].usage or {}
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == usage["output_tokens"]
    assert money.exchanges()[-1].body["stream"] is True
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model, key", [("claude-a", TEST_KEY), ("auto", AUTO_A_KEY)])
def test_cache_control_on_a_chat_part_is_a_breakpoint_upstream(
        anthropic_gateway: Gateway, anthropic_server: AnthropicServer, stream: bool,
        model: str, key: str) -> None:
    """LiteLLM's form: ``cache_control`` on a chat content part. The first call writes the
    marked system prompt to the server's cache, the second reads it; the chat door shows
    the read as ``cached_tokens``, and both bill the server's usage to the nano-dollar.
    ``/metrics`` says what the read saved and what the write cost above the input price.
    Routed (``auto``) alike: reading the prompt for its prefix once took the marks off the
    body itself, so they never reached the upstream."""
    client = openai.OpenAI(base_url=anthropic_gateway.base_url, api_key=key, max_retries=0,
                           timeout=30)
    money = Money(anthropic_gateway, anthropic_server, key)
    saved0, premium0 = cache_dollars(anthropic_gateway)
    rules = f"You keep the house rules of chat-{stream}-{model}. " + "Answer briefly, cite. " * 300
    messages: Any = [
        {"role": "system", "content": [{"type": "text", "text": rules,
                                        "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "Which rule applies?"}]
    shown = []
    for _ in range(2):
        if stream:
            chunks = list(client.chat.completions.create(
                model=model, messages=messages, max_tokens=16, stream=True,
                stream_options={"include_usage": True}))
            shown.append(chunks[-1].usage)
        else:
            shown.append(client.chat.completions.create(
                model=model, messages=messages, max_tokens=16).usage)
    first, second = money.exchanges()[-2:]
    assert first.body["system"] == [{"type": "text", "text": rules,
                                     "cache_control": {"type": "ephemeral"}}]
    written = (first.usage or {})["cache_creation_input_tokens"]
    assert written > 1024 and (second.usage or {})["cache_read_input_tokens"] == written
    assert shown[1] is not None and shown[1].prompt_tokens_details is not None
    assert shown[1].prompt_tokens_details.cached_tokens == written
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0
    saved = written * (PRICE["input_per_mtok"] - PRICE["cached_input_per_mtok"]) / 1e6
    premium = written * (PRICE["cache_write_per_mtok"] - PRICE["input_per_mtok"]) / 1e6
    deadline = time.monotonic() + 5           # the metrics are flushed a moment after
    figures = cache_dollars(anthropic_gateway)
    while (figures[0] == saved0 or figures[1] == premium0) and time.monotonic() < deadline:
        time.sleep(0.05)
        figures = cache_dollars(anthropic_gateway)
    assert figures[0] - saved0 == pytest.approx(saved, rel=1e-6)
    assert figures[1] - premium0 == pytest.approx(premium, rel=1e-6)


def cache_dollars(gw: Gateway) -> tuple[float, float]:
    """claude-a's prefix-cache saving and write premium so far, in USD, from /metrics."""
    saved = premium = 0.0
    for line in httpx.get(gw.url + "/metrics").text.splitlines():
        if 'model="claude-a"' not in line:
            continue
        if line.startswith("routegate_cache_saved_usd_total{") and 'cache="prefix"' in line:
            saved += float(line.split()[-1])
        elif line.startswith("routegate_cache_write_premium_usd_total{"):
            premium += float(line.split()[-1])
    return saved, premium


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_tool_call(client: openai.OpenAI, anthropic_gateway: Gateway,
                            anthropic_server: AnthropicServer, stream: bool) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    kwargs: Any = {"model": "claude-a", "messages": ASK, "tools": [WEATHER], "max_tokens": 128,
                   "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
        arguments = "".join(t.function.arguments or "" for t in calls if t.function)
        name = calls[0].function.name if calls[0].function else None
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        answer = client.chat.completions.create(**kwargs)
        call: Any = (answer.choices[0].message.tool_calls or [])[0]
        assert call.type == "function"
        arguments, name = call.function.arguments, call.function.name
        finish = answer.choices[0].finish_reason
    assert (name, json.loads(arguments), finish) == ("get_weather", {"city": "Paris"}, "tool_calls")
    sent = money.exchanges()[-1].body
    assert sent["tool_choice"] == {"type": "tool", "name": "get_weather"}
    assert sent["tools"][0]["input_schema"] == WEATHER["function"]["parameters"]
    assert money.breaches() == []
    assert money.settled()[0] == money.settled()[1]


def test_a_tool_result_round_trip(client: openai.OpenAI, anthropic_gateway: Gateway,
                                  anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    first = client.chat.completions.create(model="claude-a", messages=ASK, tools=[WEATHER],
                                           max_tokens=128)
    call: Any = (first.choices[0].message.tool_calls or [])[0]
    history: list[ChatCompletionMessageParam] = [
        *ASK, {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"}]
    second = client.chat.completions.create(model="claude-a", messages=history, tools=[WEATHER],
                                            max_tokens=128)
    assert second.choices[0].finish_reason == "stop"
    assert (second.choices[0].message.content or "").startswith("Thanks, the tool answered.")
    turns = money.exchanges()[-1].body["messages"]
    assert turns[-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "18C and sunny"}]}
    assert turns[-2]["content"][0]["type"] == "tool_use"
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected


def test_json_schema_is_structured_output(client: openai.OpenAI, anthropic_gateway: Gateway,
                                          anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    answer = client.chat.completions.create(
        model="claude-a", messages=ASK, max_tokens=128,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "weather", "strict": True, "schema": SCHEMA}})
    assert json.loads(answer.choices[0].message.content or "") == {"city": "Paris", "temp": 21.5}
    assert money.exchanges()[-1].body["output_config"] == {
        "format": {"type": "json_schema", "schema": SCHEMA}}
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected


def test_an_image_reaches_the_upstream_as_a_block(client: openai.OpenAI,
                                                  anthropic_gateway: Gateway,
                                                  anthropic_server: AnthropicServer) -> None:
    from tests.providers.test_anthropic_server import png

    money = Money(anthropic_gateway, anthropic_server)
    client.chat.completions.create(model="claude-a", max_tokens=32, messages=[
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png(300, 250)}},
            {"type": "text", "text": "What is it?"}]}])
    block = money.exchanges()[-1].body["messages"][0]["content"][0]
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected


def test_the_responses_door_is_translated_too(client: openai.OpenAI, anthropic_gateway: Gateway,
                                              anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    response = client.responses.create(model="claude-a", instructions="You are terse.",
                                       input="Name a city.", max_output_tokens=32, store=False)
    assert response.status == "completed" and "Name a city." in response.output_text
    sent = money.exchanges()[-1]
    assert sent.body["system"] == [{"type": "text", "text": "You are terse."}]
    assert response.usage is not None
    assert response.usage.output_tokens == (sent.usage or {})["output_tokens"]
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0


def test_a_batch_line_runs_in_the_batch_pool_and_bills_the_servers_usage(
        client: openai.OpenAI, anthropic_gateway: Gateway, anthropic_server: AnthropicServer
) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "claude-a", "messages": ASK, "max_tokens": 64}}
    upload = client.files.create(file=("in.jsonl", io.BytesIO(json.dumps(line).encode() + b"\n")),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    deadline = time.monotonic() + 60
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert batch.status == "completed" and batch.output_file_id is not None
    out = json.loads(client.files.content(batch.output_file_id).content.splitlines()[0])
    assert out["response"]["status_code"] == 200 and out["response"]["body"]["model"] == "claude-a"
    assert money.breaches() == []
    spent, expected = money.settled({"claude-test": 0.5})     # the batch pool's price
    assert spent == expected > 0
