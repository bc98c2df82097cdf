"""Anthropic's stream events -> chat chunks (``backends/anthropic_messages/events.py``).

The inputs are Anthropic's own recorded streams (tests/protocols/fixtures);
the chunks are assembled by the gateway's one tool-call accumulator
(``gateway/pipeline/answers.py``) and parsed by the openai SDK's chunk type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from backends.anthropic_messages.events import ChatChunks
from backends.sse import EventSplitter, SSEEvent
from core.errors import UpstreamError, UpstreamOverloaded, UpstreamRejected
from core.usage import Usage
from gateway.pipeline.answers import stream_message

FIXTURES = Path(__file__).parents[1] / "protocols" / "fixtures"


def recorded(name: str) -> list[dict[str, Any]]:
    events = [SSEEvent.parse(raw) for raw in EventSplitter().feed(
        (FIXTURES / name).read_bytes() + b"\n\n")]
    return [e.data for e in events if e.data is not None]


def translate(events: list[dict[str, Any]]) -> tuple[ChatChunks, list[SSEEvent]]:
    chunks = ChatChunks("claude-configured", 1_700_000_000)
    out = []
    for data in events:
        chunk = chunks.feed(data)
        if chunk is not None:
            ChatCompletionChunk.model_validate(chunk)      # the openai SDK's own type
            out.append(SSEEvent.from_data(chunk))
    return chunks, out


def test_a_recorded_text_stream() -> None:
    chunks, out = translate(recorded("anthropic_basic.sse"))
    message, finish, _ = stream_message(out)
    assert message == {"role": "assistant", "content": "Hello there!"}
    assert finish == "stop"
    assert chunks.finished and out[-1].is_usage_only
    assert chunks.usage == Usage(11, 6)
    assert out[-1].data["usage"]["prompt_tokens"] == 11     # type: ignore[index]


def test_a_recorded_tool_call_is_assembled_downstream() -> None:
    chunks, out = translate(recorded("anthropic_tool_use.sse"))
    message, finish, _ = stream_message(out)
    assert finish == "tool_calls"
    assert message["content"] == "I'll check the current weather in Paris for you."
    assert message["tool_calls"] == [{
        "type": "function", "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn",
        "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}}]
    assert chunks.usage == Usage(377, 65)


START: dict[str, Any] = {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-x",
    "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 2000, "output_tokens": 1}}}


def block(index: int, content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content}


def delta(index: int, content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": content}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


END: list[dict[str, Any]] = [
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 42}},
    {"type": "message_stop"}]


def test_usage_merges_message_start_and_the_cumulative_message_delta() -> None:
    chunks, out = translate([START, {"type": "ping"}, *END])
    assert chunks.usage == Usage(2010, 42, cached_tokens=2000)     # never added
    assert len(out) == 3          # role, finish, usage: the ping is nothing


def test_a_tool_call_without_arguments_gets_an_empty_object() -> None:
    _, out = translate([START, block(0, {"type": "tool_use", "id": "toolu_1", "name": "now",
                                         "input": {}}),
                        delta(0, {"type": "input_json_delta", "partial_json": ""}), stop(0), *END])
    message, _, _ = stream_message(out)
    assert message["tool_calls"][0]["function"] == {"name": "now", "arguments": "{}"}


def test_thinking_is_reasoning_and_signatures_and_citations_are_nothing() -> None:
    _, out = translate([START, block(0, {"type": "thinking", "thinking": ""}),
                        delta(0, {"type": "thinking_delta", "thinking": "Let me see."}),
                        delta(0, {"type": "signature_delta", "signature": "EqQ"}), stop(0),
                        block(1, {"type": "text", "text": ""}),
                        delta(1, {"type": "citations_delta", "citation": {}}),
                        delta(1, {"type": "text_delta", "text": "42"}), stop(1), *END])
    assert [e.generated for e in out if e.generated] == ["Let me see.", "42"]


def test_bad_indexes_from_the_upstream_are_ignored() -> None:
    _, out = translate([START, block(True, {"type": "tool_use", "id": "x", "name": "n"}),  # type: ignore[arg-type]
                        delta(-1, {"type": "text_delta", "text": "no"}),
                        delta(0, {"type": "input_json_delta", "partial_json": "{}"}), *END])
    message, _, _ = stream_message(out)
    assert "tool_calls" not in message and message["content"] is None


@pytest.mark.parametrize("kind, error", [
    ("overloaded_error", UpstreamOverloaded), ("api_error", UpstreamError),
    ("invalid_request_error", UpstreamRejected)])
def test_an_error_event_raises_the_gateways_error(kind: str, error: type) -> None:
    chunks = ChatChunks("m", 0, known=("sk-secret-123456",))
    chunks.feed(START)
    with pytest.raises(error) as raised:
        chunks.feed({"type": "error", "error": {"type": kind,
                                                "message": "bad key sk-secret-123456"}})
    assert "sk-secret-123456" not in str(raised.value)


def test_an_unreadable_usage_is_marked_so_billing_counts_for_itself() -> None:
    chunks = ChatChunks("m", 0)
    chunks.feed({**START, "message": {**START["message"], "usage": {"input_tokens": -5}}})
    usage_chunk = chunks.feed({"type": "message_stop"})
    assert usage_chunk is not None and Usage.from_wire(usage_chunk["usage"]) is None


def test_the_prompt_anthropic_counted_outlives_a_delta_that_cannot_be_read() -> None:
    """``message_start`` says how the prompt was read; a ``message_delta`` whose usage is
    unreadable loses the whole usage, not that: a stream that then breaks still bills
    its prompt by it (``MessagesChunkStream.prompt_seen``)."""
    chunks = ChatChunks("claude", 0)
    assert chunks.start_usage is None
    chunks.feed({"type": "message_start", "message": {"id": "m", "usage": {
        "input_tokens": 12, "cache_creation_input_tokens": 5000, "cache_read_input_tokens": 0,
        "output_tokens": 1}}})
    chunks.feed({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                 "usage": {"output_tokens": "20"}})
    assert chunks.usage is None
    assert chunks.start_usage == Usage(5012, 1, cached_tokens=0, cache_write_tokens=5000)
