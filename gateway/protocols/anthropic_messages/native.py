"""Answers an Anthropic upstream served natively: relayed as it wrote them.

    body = native_message(completion.native, billed, corrected)   # a non-streamed answer
    relay = MessagesRelay(wire, prompt_tokens)                     # the door's translator

A request on this door that an ``anthropic`` model serves goes upstream as
the client wrote it (``backends/base.py``, ``NativeRequest``); its answer
comes back as Anthropic wrote it, the configured model named
(``Completion.native``, ``NativeEvent``s), with thinking, citations and the
cache's counts intact. Only when billing had to correct the upstream's
usage (``corrected``: figures past what the request may bill) is ``usage``
rewritten, so the client sees what it is billed. Any other upstream's
answer, in chat form, is translated as before (``render.py``, ``stream.py``):
``MessagesRelay`` decides per event.
"""

from __future__ import annotations

from typing import Any

import orjson

from backends.anthropic_messages.from_wire import merged_usage, usage_of
from backends.base import ANTHROPIC_MESSAGES
from backends.sse import NativeEvent, SSEEvent
from core.errors import GatewayError
from core.types import Usage
from gateway.protocols.anthropic_messages.parse import MessagesWire
from gateway.protocols.anthropic_messages.render import usage_block
from gateway.protocols.anthropic_messages.stream import MessagesStream, sse

MESSAGE_STOP = sse("message_stop", {"type": "message_stop"})


def _billed_split(billed: Usage, reported: Usage | None) -> Usage:
    """``billed``, its cache writes as the upstream reported them (within the prompt):
    a stream's billed usage comes from the chat usage chunk, which has no such field."""
    if billed.cache_write_tokens or reported is None:
        return billed
    written = min(reported.cache_write_tokens, max(0, billed.prompt_tokens - billed.cached_tokens))
    return Usage(billed.prompt_tokens, billed.completion_tokens, billed.estimated,
                 billed.cached_tokens, written)


def _same(billed: Usage, reported: Usage | None) -> bool:
    return reported is not None and (billed.prompt_tokens, billed.completion_tokens) == (
        reported.prompt_tokens, reported.completion_tokens)


def native_message(native: bytes, billed: Usage, corrected: bool) -> bytes:
    """The upstream's message, untouched unless its usage was corrected."""
    if not corrected:
        return native
    data = orjson.loads(native)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    data["usage"] = {**usage, **usage_block(billed)}
    return orjson.dumps(data)


class MessagesRelay:
    """The door's stream translator: native events relayed, chat chunks translated."""

    def __init__(self, wire: MessagesWire, prompt_tokens: int = 0) -> None:
        self.translated = MessagesStream(wire, prompt_tokens=prompt_tokens)
        self.native = False
        self._start_usage: Any = None
        self._delta: dict[str, Any] | None = None     # message_delta, held until finish
        self._delta_raw = b""
        self._stop = MESSAGE_STOP                       # the upstream's own, once it came

    def feed(self, event: SSEEvent) -> list[bytes]:
        if not (isinstance(event, NativeEvent) and event.protocol == ANTHROPIC_MESSAGES):
            return self.translated.feed(event)
        self.native = True
        data = SSEEvent.parse(event.native).data or {}
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message")
            self._start_usage = message.get("usage") if isinstance(message, dict) else None
        elif kind == "message_delta":
            self._delta, self._delta_raw = data, event.native   # its usage may need correcting
            return []
        elif kind == "message_stop":
            self._stop = event.native  # finish sends it, after message_delta
            return []
        return [event.native]

    async def finish(self, usage: Usage) -> list[bytes]:
        if not self.native:
            return await self.translated.finish(usage)
        if self._delta is None:
            return [self._stop]
        reported = usage_of(merged_usage(self._start_usage, self._delta.get("usage")))
        if _same(usage, reported):
            return [self._delta_raw, self._stop]
        fixed = usage_block(_billed_split(usage, reported))
        sent = self._delta.get("usage")
        self._delta["usage"] = {**(sent if isinstance(sent, dict) else {}), **fixed}
        return [sse("message_delta", self._delta), self._stop]

    def fail(self, exc: GatewayError) -> list[bytes]:
        return self.translated.fail(exc)
