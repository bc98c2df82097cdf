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
