"""``/v1/messages`` served natively (``gateway/protocols/anthropic_messages/native.py``): pure.

An anthropic upstream's own events pass through byte for byte, and its usage
is rewritten only when billing corrected it; chat chunks from any other
upstream are still translated. The SDK's own stream accumulator reads the
result.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from backends.anthropic_messages.from_wire import usage_of
from backends.base import ANTHROPIC_MESSAGES
from backends.sse import NativeEvent, SSEEvent
from core.usage import Usage
from gateway.protocols.anthropic_messages.native import MessagesRelay, native_message
from gateway.protocols.anthropic_messages.parse import MessagesWire
from tests.providers.anthropic_server import stream_events

EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-configured",
           "content": [{"type": "text", "text": "Hello there, friend."}],
           "stop_reason": "end_turn", "stop_sequence": None,
           "usage": {"input_tokens": 10, "cache_creation_input_tokens": 300,
                     "cache_read_input_tokens": 2000, "output_tokens": 7}}
REPORTED = Usage(2310, 7, cached_tokens=2000, cache_write_tokens=300)


def native_events() -> list[NativeEvent]:
    return [NativeEvent(b"", None, native=raw, protocol=ANTHROPIC_MESSAGES)
            for raw in stream_events(MESSAGE)]


def relayed(billed: Usage) -> bytes:
    relay = MessagesRelay(MessagesWire("auto"))
    out: list[bytes] = []
    for event in native_events():
        out.extend(relay.feed(event))
    out.extend(asyncio.run(relay.finish(billed)))
    return b"".join(out)


def accumulated(raw: bytes) -> Message:
    snapshot: Any = None
    for chunk in raw.split(b"\n\n"):
        event = SSEEvent.parse(chunk + b"\n\n")
        if event.data is None or event.data["type"] == "ping":
            continue
        snapshot = accumulate_event(event=EVENT.validate_python(event.data),
                                    current_snapshot=snapshot, json_bufs={})
    return Message.model_validate(snapshot.to_dict())


def test_native_events_pass_through_byte_for_byte() -> None:
    assert relayed(REPORTED) == b"".join(stream_events(MESSAGE))
    message = accumulated(relayed(REPORTED))
    assert message.model == "claude-configured" and message.usage.cache_read_input_tokens == 2000


def test_a_corrected_usage_is_what_the_stream_shows() -> None:
    billed = Usage(2310, 4, cached_tokens=2000, cache_write_tokens=300)   # output clamped
    message = accumulated(relayed(billed))
    assert message.usage.output_tokens == 4
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens,
            message.usage.cache_creation_input_tokens) == (10, 2000, 300)


def test_a_non_streamed_answer_is_untouched_unless_corrected() -> None:
    raw = orjson.dumps(MESSAGE)
    assert native_message(raw, REPORTED, corrected=False) is raw
    fixed = orjson.loads(native_message(raw, Usage(2310, 4, cached_tokens=2000,
                                                   cache_write_tokens=300), corrected=True))
    assert fixed["usage"]["output_tokens"] == 4 and fixed["content"] == MESSAGE["content"]


def test_chat_chunks_from_another_upstream_are_translated() -> None:
    relay = MessagesRelay(MessagesWire("auto"))
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "sim",
             "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}
    out = relay.feed(SSEEvent.from_data(chunk)) + asyncio.run(relay.finish(Usage(3, 1)))
    message = accumulated(b"".join(out))
    assert [b.model_dump(exclude_none=True) for b in message.content] == [
        {"type": "text", "text": "Hi"}]
    assert message.usage.input_tokens == 3 and message.model == "sim"


def with_split(five: Any, hour: Any) -> dict[str, Any]:
    usage = {**MESSAGE["usage"], "cache_creation": {"ephemeral_5m_input_tokens": five,  # type: ignore[dict-item]
                                                    "ephemeral_1h_input_tokens": hour}}
    return {**MESSAGE, "usage": usage}


def test_a_split_of_the_writes_that_is_not_their_count_is_flagged_and_shown_as_billed() -> None:
    """``cache_creation``'s 5-minute figure was never read: 1e30 (or 0 of 300 writes)
    passed through beside the 300 billed at the 5-minute price."""
    for five in (1e30, 0, "300", -1):
        message = with_split(five, 0)
        read = usage_of(message["usage"])
        assert read is not None and read.cache_anomaly is not None
        assert (read.cache_write_tokens, read.cache_write_1h_tokens) == (300, 0)
        shown = orjson.loads(native_message(orjson.dumps(message), read, corrected=True))
        assert shown["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 300,
                                                    "ephemeral_1h_input_tokens": 0}
        relay = MessagesRelay(MessagesWire("auto"))
        out: list[bytes] = []
        for raw in stream_events(message):
            out.extend(relay.feed(NativeEvent(b"", None, native=raw, protocol=ANTHROPIC_MESSAGES)))
        out.extend(asyncio.run(relay.finish(read)))
        streamed = accumulated(b"".join(out)).usage     # as the SDK keeps it
        assert streamed.cache_creation is not None
        assert (streamed.cache_creation.ephemeral_5m_input_tokens,
                streamed.cache_creation.ephemeral_1h_input_tokens) == (300, 0)
    good = with_split(100, 200)
    assert usage_of(good["usage"]) == Usage(2310, 7, cached_tokens=2000, cache_write_tokens=300,
                                           cache_write_1h_tokens=200)


def test_a_stream_corrected_at_its_end_says_the_split_billed_in_its_delta() -> None:
    """The SDK keeps ``message_start``'s split; the corrected ``message_delta`` carries the
    one billed where the start's differs, for a client that reads the events."""
    relay = MessagesRelay(MessagesWire("auto"))
    out: list[bytes] = []
    for raw in stream_events(with_split(100, 200)):
        out.extend(relay.feed(NativeEvent(b"", None, native=raw, protocol=ANTHROPIC_MESSAGES)))
    billed = Usage(2110, 7, cached_tokens=2000, cache_write_tokens=100, cache_write_1h_tokens=100)
    out.extend(asyncio.run(relay.finish(billed)))
    delta = next(SSEEvent.parse(c + b"\n\n").data for c in b"".join(out).split(b"\n\n")
                 if b"message_delta" in c)
    assert delta["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 0,   # type: ignore[index]
                                                "ephemeral_1h_input_tokens": 100}
    # Uncorrected, or corrected with the start's split standing: Anthropic's delta shape.
    relay = MessagesRelay(MessagesWire("auto"))
    out = []
    for raw in stream_events(MESSAGE):
        out.extend(relay.feed(NativeEvent(b"", None, native=raw, protocol=ANTHROPIC_MESSAGES)))
    out.extend(asyncio.run(relay.finish(Usage(2310, 4, cached_tokens=2000, cache_write_tokens=300))))
    delta = next(SSEEvent.parse(c + b"\n\n").data for c in b"".join(out).split(b"\n\n")
                 if b"message_delta" in c)
    assert "cache_creation" not in delta["usage"]   # type: ignore[index]
