"""Bedrock Converse answers and stream events -> OpenAI answers and chunks: named cases,
no server. The stream case is the event sequence boto3 parsed in the research notes
(``/work/notes/providers_proof/bedrock/proof_output.txt``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends.bedrock.reply import ChunkTranslator, finish_reason, from_converse, read_usage
from core.errors import UpstreamError
from core.usage import Usage
from gateway.pipeline.tool_calls import ToolCalls

ANSWER = {
    "output": {"message": {"role": "assistant", "content": [
        {"text": "Hello"},
        {"toolUse": {"toolUseId": "tooluse_abc", "name": "get_weather", "input": {"city": "Paris"}}}]}},
    "stopReason": "tool_use",
    "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 1219,
              "cacheReadInputTokens": 1200, "cacheWriteInputTokens": 0},
    "metrics": {"latencyMs": 321}}

# boto3's parse of a ConverseStream, in order (providers_proof/bedrock/proof_output.txt)
EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockDelta", {"delta": {"text": "Hel"}, "contentBlockIndex": 0}),
    ("contentBlockDelta", {"delta": {"text": "lo"}, "contentBlockIndex": 0}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("contentBlockStart", {"start": {"toolUse": {"toolUseId": "tooluse_1",
                                                 "name": "get_weather"}}, "contentBlockIndex": 1}),
    ("contentBlockDelta", {"delta": {"toolUse": {"input": "{\"city\": "}}, "contentBlockIndex": 1}),
    ("contentBlockDelta", {"delta": {"toolUse": {"input": "\"Paris\"}"}}, "contentBlockIndex": 1}),
    ("contentBlockStop", {"contentBlockIndex": 1}),
    ("messageStop", {"stopReason": "tool_use"}),
    ("metadata", {"usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19,
                            "cacheReadInputTokens": 0, "cacheWriteInputTokens": 0},
                  "metrics": {"latencyMs": 42}, "p": "abcdefgh"}),
]


@pytest.mark.parametrize("usage, expected", [
    ({"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}, Usage(12, 7)),
    ({"inputTokens": 12, "outputTokens": 7, "cacheReadInputTokens": 1200,
      "cacheWriteInputTokens": 300}, Usage(1512, 7, cached_tokens=1200, cache_write_tokens=300)),
    ({"inputTokens": -1, "outputTokens": 7}, None),
    ({"inputTokens": 3.5, "outputTokens": 7}, None),
    ({"outputTokens": 7}, None),
    ("lots", None),
], ids=["plain", "cache reads and writes are prompt tokens too", "negative", "not an integer",
        "missing", "not an object"])
def test_usage(usage: Any, expected: Usage | None) -> None:
    got, wire = read_usage(usage)
    assert got == expected
    if expected is not None:
        assert wire == {"prompt_tokens": expected.prompt_tokens,
                        "completion_tokens": expected.completion_tokens,
                        "total_tokens": expected.prompt_tokens + expected.completion_tokens,
                        "prompt_tokens_details": {"cached_tokens": expected.cached_tokens,
                                                  "cache_write_tokens": expected.cache_write_tokens}}
        assert Usage.from_wire(wire) == expected     # the gateway reads back what it billed


@pytest.mark.parametrize("stop, finish", [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"), ("tool_use", "tool_calls"),
    ("guardrail_intervened", "content_filter"), ("content_filtered", "content_filter"),
    ("something_new", "stop")])
def test_stop_reasons(stop: str, finish: str) -> None:
    assert finish_reason(stop) == finish


def test_malformed_output_is_an_upstream_failure() -> None:
    with pytest.raises(UpstreamError) as failed:
        finish_reason("malformed_tool_use")
    assert failed.value.retryable


def test_an_answer_with_text_and_a_tool_call() -> None:
    chat = from_converse(ANSWER, "chatcmpl-1", "anthropic.claude", 1700000000)
    choice = chat["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {"role": "assistant", "content": "Hello", "tool_calls": [
        {"id": "tooluse_abc", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}
    assert chat["usage"]["prompt_tokens"] == 1212
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == 1200


def test_the_structured_tool_is_the_answers_text() -> None:
    answer = {**ANSWER, "output": {"message": {"role": "assistant", "content": [
        {"toolUse": {"toolUseId": "t", "name": "forecast", "input": {"celsius": 18}}}]}}}
    choice = from_converse(answer, "c", "m", 0, structured="forecast")["choices"][0]
    assert choice == {"index": 0, "logprobs": None, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": '{"celsius":18}'}}


def test_a_stream_translates_to_chunks_the_accumulator_assembles() -> None:
    translator = ChunkTranslator("chatcmpl-1", "m", 0)
    chunks = [c for kind, payload in EVENTS for c in translator.feed(kind, payload)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content") or "" for d in deltas) == "Hello"
    calls = ToolCalls()
    for d in deltas:
        calls.feed(d.get("tool_calls"))
    assert calls.assembled() == [{"type": "function", "id": "tooluse_1", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert json.loads(calls.assembled()[0]["function"]["arguments"]) == {"city": "Paris"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 7
    assert translator.usage == Usage(12, 7) and translator.finished


def test_a_streamed_structured_answer_is_content() -> None:
    translator = ChunkTranslator("c", "m", 0, structured="forecast")
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"}),
              ("contentBlockStart", {"contentBlockIndex": 0, "start": {"toolUse": {
                  "toolUseId": "t", "name": "forecast"}}}),
              ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {
                  "input": '{"celsius"'}}}),
              ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {
                  "input": ": 18}"}}}),
              ("messageStop", {"stopReason": "tool_use"}), ("somethingNew", {"x": 1})]
    chunks = [c for kind, payload in events for c in translator.feed(kind, payload)]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == '{"celsius": 18}'
    assert not any("tool_calls" in d for d in deltas)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
