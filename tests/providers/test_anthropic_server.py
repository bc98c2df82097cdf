"""The Anthropic test server, checked by the official ``anthropic`` SDK (its oracle).

The SDK calls the server directly: answers, streams, tools, the prompt
cache, count_tokens, errors and faults are parsed by the SDK's own types and
stream decoder, so the server the gateway's tests rely on speaks the wire
format the SDK expects. Off-spec requests are refused as Anthropic refuses
them, and the ledger says so.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.providers.anthropic_server import ANTHROPIC_KEY, AnthropicServer, run_anthropic_server

MODEL = "claude-test"
HELLO: list[MessageParam] = [{"role": "user", "content": "Say hello to the test server."}]
WEATHER: ToolParam = {"name": "get_weather", "description": "The weather in a city now.",
                      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                       "required": ["city"]}}
RULES = "House rule: answer briefly, cite the rule, and never guess. " * 120   # > 1,024 tokens


def png(width: int, height: int) -> str:
    """A real (tiny) PNG of that size, base64: its header is what the server reads."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    raw = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
           + chunk(b"IDAT", zlib.compress(b"\x00" * (width + 1) * 2)) + chunk(b"IEND", b""))
    return base64.b64encode(raw).decode()


@pytest.fixture(scope="module")
def server() -> Iterator[AnthropicServer]:
    with run_anthropic_server() as running:
        yield running


@pytest.fixture
def sdk(server: AnthropicServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=ANTHROPIC_KEY, max_retries=0,
                               timeout=10)


def status_of(server: AnthropicServer) -> int:
    return server.ledger[-1].status


def test_a_message_is_parsed_and_counted_as_count_tokens_counts_it(sdk: anthropic.Anthropic,
                                                                    server: AnthropicServer) -> None:
    message = sdk.messages.create(model=MODEL, max_tokens=64, messages=HELLO)
    assert message.type == "message" and message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and "Say hello" in message.content[0].text
    counted = sdk.messages.count_tokens(model=MODEL, messages=HELLO)
    assert message.usage.input_tokens == counted.input_tokens > 0
    assert message.usage.cache_read_input_tokens == message.usage.cache_creation_input_tokens == 0
    assert not server.off_spec()


def test_a_stream_accumulates_into_the_same_message(sdk: anthropic.Anthropic) -> None:
    whole = sdk.messages.create(model=MODEL, max_tokens=64, messages=HELLO)
    with sdk.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert ([b.model_dump(exclude_none=True) for b in final.content]
            == [b.model_dump(exclude_none=True) for b in whole.content])
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_forced_tool_call_and_its_result_round_trip(sdk: anthropic.Anthropic,
                                                      server: AnthropicServer) -> None:
    asked: list[MessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
    called = sdk.messages.create(model=MODEL, max_tokens=256, messages=asked, tools=[WEATHER],
                                 tool_choice={"type": "tool", "name": "get_weather"})
    use = called.content[-1]
    assert called.stop_reason == "tool_use" and use.type == "tool_use"
    assert use.input == {"city": "Paris"}
    with sdk.messages.stream(model=MODEL, max_tokens=256, messages=asked, tools=[WEATHER],
                             tool_choice={"type": "any"}) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[-1].type == "tool_use" and streamed.content[-1].input == {"city": "Paris"}
    history: list[MessageParam] = [*asked, {"role": "assistant", "content": called.content},
                                   {"role": "user", "content": [{"type": "tool_result",
                                                                 "tool_use_id": use.id,
                                                                 "content": "18C, sunny"}]}]
    answer = sdk.messages.create(model=MODEL, max_tokens=256, messages=history, tools=[WEATHER])
    assert answer.stop_reason == "end_turn" and answer.content[0].type == "text"
    assert not server.off_spec()


def test_the_prompt_cache_writes_then_reads_the_marked_prefix(sdk: anthropic.Anthropic) -> None:
    system: Any = [{"type": "text", "text": "SDK cache test. " + RULES,
                    "cache_control": {"type": "ephemeral"}}]
    first = sdk.messages.create(model=MODEL, max_tokens=32, system=system, messages=HELLO)
    second = sdk.messages.create(model=MODEL, max_tokens=32, system=system, messages=HELLO)
    assert (first.usage.cache_creation_input_tokens or 0) > 1024
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens      # what follows the mark
    short: Any = [{"type": "text", "text": "Too short to cache.",
                   "cache_control": {"type": "ephemeral"}}]
    below = sdk.messages.create(model=MODEL, max_tokens=32, system=short, messages=HELLO)
    assert below.usage.cache_creation_input_tokens == 0      # no error, no caching


def test_an_image_costs_width_times_height_over_750(sdk: anthropic.Anthropic) -> None:
    plain = sdk.messages.create(model=MODEL, max_tokens=16, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is it?"}]}])
    seen = sdk.messages.create(model=MODEL, max_tokens=16, messages=[
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": png(300, 250)}},
            {"type": "text", "text": "What is it?"}]}])
    assert seen.usage.input_tokens - plain.usage.input_tokens == 100     # 300 * 250 / 750


def test_thinking_and_citations_come_back_in_the_sdks_types(sdk: anthropic.Anthropic) -> None:
    message = sdk.messages.create(
        model=MODEL, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": [
            {"type": "document", "title": "Memo", "citations": {"enabled": True},
             "source": {"type": "text", "media_type": "text/plain", "data": "Ship on Friday."}},
            {"type": "text", "text": "When do we ship?"}]}])
    assert message.content[0].type == "thinking" and message.content[0].signature
    text = message.content[1]
    assert text.type == "text" and text.citations
    assert text.citations[0].type == "char_location"
    assert text.citations[0].cited_text == "Ship on Friday."


OFF_SPEC: dict[str, tuple[dict[str, Any], str]] = {
    "an unknown field": ({"extra_body": {"temprature": 0.5}},
                         "temprature: Extra inputs are not permitted"),
    "temperature under API version 2026-10-21": (
        {"extra_body": {"temperature": 0.5}}, "temperature: Extra inputs are not permitted"),
    "an empty text block": (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
        "text content blocks must be non-empty"),
    "a tool_result without its tool_use": (
        {"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_x", "content": "18C"}]}]},
        "unexpected `tool_use_id` found in `tool_result` blocks: toolu_x"),
    "a tool_use left without its result": (
        {"messages": [{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_y",
                                                         "name": "get_weather", "input": {}}]},
                      {"role": "user", "content": "And?"}], "tools": [WEATHER]},
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_y"),
    "five cache breakpoints": (
        {"system": [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
                    for i in range(5)]},
        "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    "max_tokens past the model's": ({"max_tokens": 100_000},
                                    "max_tokens: 100000 > 8192, which is the maximum"),
    "an image that is not what it says": (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/jpeg", "data": png(2, 2)}}]}]},
        "Image does not match the provided media type image/jpeg"),
}


@pytest.mark.parametrize("case", OFF_SPEC)
def test_off_spec_requests_are_refused_as_anthropic_refuses_them(
        case: str, sdk: anthropic.Anthropic, server: AnthropicServer) -> None:
    fields, message = OFF_SPEC[case]
    kwargs: Any = {"model": MODEL, "max_tokens": 64, "messages": HELLO, **fields}
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.messages.create(**kwargs)
    error = refused.value.body["error"]                    # type: ignore[index]
    assert error["type"] == "invalid_request_error" and message in error["message"]
    assert server.ledger[-1].off_spec and status_of(server) == 400


def test_consecutive_turns_are_combined_and_noted(sdk: anthropic.Anthropic,
                                                 server: AnthropicServer) -> None:
    sdk.messages.create(model=MODEL, max_tokens=16, messages=[
        {"role": "user", "content": "One."}, {"role": "user", "content": "Two."}])
    assert server.ledger[-1].status == 200
    assert server.ledger[-1].lints == ["messages.1: consecutive user turns (combined)"]


def test_a_bad_key_a_missing_version_and_missing_max_tokens(server: AnthropicServer) -> None:
    wrong = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model=MODEL, max_tokens=8, messages=HELLO)
    assert server.ledger[-1].error == "authentication_error"
    headers = {"x-api-key": ANTHROPIC_KEY, "content-type": "application/json"}
    body = {"model": MODEL, "max_tokens": 8, "messages": HELLO}
    r = httpx.post(server.url + "/v1/messages", json=body, headers=headers)
    assert r.status_code == 400 and "anthropic-version" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/messages", json={"model": MODEL, "messages": HELLO},
                   headers={**headers, "anthropic-version": "2023-06-01"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("max_tokens")
    assert r.json()["type"] == "error" and r.json()["request_id"].startswith("req_")
    r = httpx.post(server.url + "/v1/messages", json={**body, "temperature": 0.5},
                   headers={**headers, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200                             # the older version takes it


def test_faults_by_model_name(sdk: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.RateLimitError) as limited:
        sdk.messages.create(model="claude-throttled", max_tokens=8, messages=HELLO)
    assert limited.value.response.headers["retry-after"] == "7"
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        sdk.messages.create(model="claude-overloaded", max_tokens=8, messages=HELLO)
    assert overloaded.value.status_code == 529
    for model in ("claude-stream-overloaded", "claude-midstream-error"):
        with pytest.raises(anthropic.APIStatusError) as broken:    # the SDK raises the event
            with sdk.messages.stream(model=model, max_tokens=64, messages=HELLO) as stream:
                for _ in stream:
                    pass
        assert broken.value.body["error"]["type"] == "overloaded_error"   # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.create(model="claude-nonesuch", max_tokens=8, messages=HELLO)
