"""The Messages stream translator: recorded chat-chunk streams in, Anthropic's events out.

The inputs are OpenAI's own recorded streams (``fixtures/openai_*.sse``,
from openai-python's ``.inline-snapshot/external`` recordings used by
``tests/lib/chat/test_completions_streaming.py``: 83b060bae42e (text),
f82268f2fefd (parallel tool calls), 173417d55340 (a refusal), at commit
e43b4224); the references are Anthropic's own recorded streams
(``fixtures/anthropic_*.sse``: ``basic_response.txt`` and
``tool_use_response.txt`` of anthropic-sdk-python's
``tests/lib/streaming/fixtures``, at commit 009b0353). What comes out is
decoded by the SDK's own SSE decoder, validated event by event against the
SDK's ``RawMessageStreamEvent`` types, and folded by the SDK's own stream
accumulator (``accumulate_event``, what ``messages.stream`` runs), exactly as
a client would see it. Pure: no network.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import orjson
import pydantic
import pytest
from anthropic._streaming import SSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent

from backends.sse import SSEEvent
from core.errors import UpstreamError
from core.usage import Usage
from gateway.protocols.anthropic_messages.parse import MessagesWire
from gateway.protocols.anthropic_messages.stream import MessagesStream

FIXTURES = Path(__file__).parent / "fixtures"
EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
# Anthropic's event grammar for one message (the ping may come anywhere; it
# comes after the first block's start in Anthropic's own recordings).
GRAMMAR = re.compile(r"message_start (content_block_start (ping )?(content_block_delta )*"
                     r"content_block_stop )*message_delta message_stop")


def chunks(name: str) -> list[SSEEvent]:
    """A recorded upstream stream as the relay hands it over: no usage chunk, no [DONE]."""
    events = [SSEEvent.parse(raw + b"\n\n")
              for raw in (FIXTURES / name).read_bytes().split(b"\n\n") if raw.strip()]
    return [e for e in events if not e.done and not e.is_usage_only]


def recorded(name: str) -> bytes:
    """An Anthropic recording; the files end without the blank line after the last event."""
    return (FIXTURES / name).read_bytes().rstrip(b"\n") + b"\n\n"


def translate(events: list[SSEEvent], usage: Usage, wire: MessagesWire | None = None) -> bytes:
    stream = MessagesStream(wire or MessagesWire("fast"), "msg_test")
    out: list[bytes] = []
    for event in events:
        out.extend(stream.feed(event))
    out.extend(asyncio.run(stream.finish(usage)))
    return b"".join(out)


def decoded(raw: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data) as the SDK's own decoder reads them off the wire."""
    return [(sse.event, sse.json()) for sse in SSEDecoder().iter_bytes(iter([raw]))]


def accumulated(raw: bytes) -> Message:
    """What ``messages.stream(...).get_final_message()`` returns for this stream."""
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for name, data in decoded(raw):
        assert name == data["type"], "the event: line names the data's type"
        if name == "ping":
            continue
        event = EVENT.validate_python(data)           # strict: the SDK's own types
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    return Message.model_validate(snapshot.to_dict())


def grammar(raw: bytes) -> str:
    return " ".join(str(name) for name, _ in decoded(raw))


def test_a_text_stream_follows_anthropics_own_recorded_shape() -> None:
    raw = translate(chunks("openai_text.sse"), Usage(9, 2))
    assert grammar(raw) == ("message_start content_block_start ping content_block_delta "
                            "content_block_delta content_block_stop message_delta message_stop")
    assert GRAMMAR.fullmatch(grammar(recorded("anthropic_basic.sse")))
    message = accumulated(raw)
    assert message.model_dump(exclude_none=True) == {
        "id": "msg_test", "type": "message", "role": "assistant", "model": "gpt-4o-2024-08-06",
        "content": [{"type": "text", "text": "Foo!"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 9, "output_tokens": 2, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0}}


def test_message_start_carries_an_empty_message_and_delta_the_billed_usage() -> None:
    events = decoded(translate(chunks("openai_text.sse"), Usage(41, 3)))
    start, delta = events[0][1], events[-2][1]
    assert start["message"]["content"] == [] and start["message"]["stop_reason"] is None
    assert start["message"]["usage"]["input_tokens"] == 0      # not known before the end
    assert delta == {"type": "message_delta",
                     "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                     "usage": {"input_tokens": 41, "output_tokens": 3,
                               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def test_parallel_tool_calls_become_tool_use_blocks_with_parsed_input() -> None:
    raw = translate(chunks("openai_parallel_tools.sse"), Usage(149, 60))
    assert GRAMMAR.fullmatch(grammar(raw))
    message = accumulated(raw)
    assert [block.model_dump(exclude_none=True) for block in message.content] == [
        {"type": "tool_use", "id": "call_JMW1whyEaYG438VE1OIflxA2", "name": "GetWeatherArgs",
         "input": {"city": "Edinburgh", "country": "GB", "units": "c"}},
        {"type": "tool_use", "id": "call_DNYTawLBoN8fj3KN6qU9N1Ou", "name": "get_stock_price",
         "input": {"ticker": "AAPL", "exchange": "NASDAQ"}}]
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (149, 60)
    deltas = [d for name, d in decoded(raw) if name == "content_block_delta"]
    assert {d["delta"]["type"] for d in deltas} == {"input_json_delta"}
    assert [d["index"] for d in deltas] == [0] * 11 + [1] * 9


def test_text_then_a_tool_call_accumulates_like_anthropics_recording() -> None:
    """The same answer as anthropic_tool_use.sse, coming from a chat upstream."""
    theirs = accumulated(recorded("anthropic_tool_use.sse"))
    call = {"index": 0, "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}
    pieces = ['{"locati', 'on": "P', "ar", 'is"}']
    deltas = [{"role": "assistant", "content": "I"},
              {"content": "'ll check the current weather in Paris for you."},
              {"tool_calls": [call]},
              *({"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces)]
    events = [SSEEvent.from_data({"model": "claude-sonnet-4-20250514",
                                  "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
              for d in deltas]
    events.append(SSEEvent.from_data({"choices": [{"index": 0, "delta": {},
                                                   "finish_reason": "tool_calls"}]}))
    ours = accumulated(translate(events, Usage(377, 65)))

    def blocks(message: Message) -> list[dict[str, Any]]:
        # ``caller`` is set only by Anthropic's own service (who ran the tool).
        return [b.model_dump(exclude_none=True, exclude={"caller"}) for b in message.content]

    assert blocks(ours) == blocks(theirs)
    assert (ours.model, ours.stop_reason, ours.stop_sequence) == (
        theirs.model, theirs.stop_reason, theirs.stop_sequence)
    for field in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                  "cache_read_input_tokens"):
        assert getattr(ours.usage, field) == getattr(theirs.usage, field)


def test_a_refusal_is_text_with_stop_reason_refusal() -> None:
    message = accumulated(translate(chunks("openai_refusal.sse"), Usage(79, 11)))
    assert [b.model_dump(exclude_none=True) for b in message.content] == [
        {"type": "text", "text": "I'm sorry, I can't assist with that request."}]
    assert message.stop_reason == "refusal"


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0,
          **choice: Any) -> SSEEvent:
    return SSEEvent.from_data({"model": "m", "choices": [
        {"index": index, "delta": delta, "finish_reason": finish, **choice}]})


STREAMS = {
    "nothing at all": ([], [], "end_turn", None),
    "cut at max_tokens": ([chunk({"content": "Once"}), chunk({}, "length")],
                          [{"type": "text", "text": "Once"}], "max_tokens", None),
    "a stop sequence the upstream names": (
        [chunk({"content": "1, 2"}), chunk({}, "stop", stop_reason="END")],
        [{"type": "text", "text": "1, 2"}], "stop_sequence", "END"),
    "other answers (n > 1) are not this message": (
        [chunk({"content": "mine"}), chunk({"content": "theirs"}, index=1), chunk({}, "stop")],
        [{"type": "text", "text": "mine"}], "end_turn", None),
    "malformed chunks are skipped": (
        [SSEEvent.from_data({"choices": "x"}), chunk({"content": 5}),
         chunk({"tool_calls": "x"}), chunk({"content": "ok"}), chunk({}, "stop")],
        [{"type": "text", "text": "ok"}], "end_turn", None),
    "a tool call with no arguments": (
        [chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "now"}}]}),
         chunk({}, "tool_calls")],
        [{"type": "tool_use", "id": "c1", "name": "now", "input": {}}], "tool_use", None),
}


@pytest.mark.parametrize("case", STREAMS)
def test_streams_table(case: str) -> None:
    events, content, reason, sequence = STREAMS[case]
    raw = translate(events, Usage(5, 1), MessagesWire("fast", ("END",)))
    assert GRAMMAR.fullmatch(grammar(raw))
    message = accumulated(raw)
    assert [b.model_dump(exclude_none=True) for b in message.content] == content
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)


def test_a_broken_stream_ends_in_an_anthropic_error_event() -> None:
    stream = MessagesStream(MessagesWire("fast"))
    started = stream.feed(chunk({"content": "Hel"}))
    raw = b"".join(started + stream.fail(UpstreamError("The upstream broke off.")))
    events = decoded(raw)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "ping", "content_block_delta", "error"]
    assert events[-1][1] == {"type": "error", "error": {"type": "api_error",
                                                        "message": "The upstream broke off."}}
    assert raw.endswith(b"event: error\ndata: " + orjson.dumps(events[-1][1]) + b"\n\n")
