"""Answers an Anthropic upstream served natively: relayed as it wrote them.

    body = native_message(completion.native, billed, corrected)   # a non-streamed answer
    relay = MessagesRelay(wire, prompt_tokens)                     # the door's translator

A request on this door that an ``anthropic`` model serves goes upstream as
the client wrote it (``backends/base.py``, ``NativeRequest``); its answer
comes back as Anthropic wrote it, the configured model named
(``Completion.native``, ``NativeEvent``s), with thinking, citations and the
cache's counts intact. Only when billing had to correct the upstream's
usage (``corrected``: figures past what the request may bill, a cache figure
that was not a count, usage that could not be read) is ``usage`` rewritten,
so the client sees what it is billed: the billed usage carries the cache's
reads and writes as the upstream reported them (``from_wire.usage_of``).
Any other upstream's answer, in chat form, is translated as before
(``render.py``, ``stream.py``): ``MessagesRelay`` decides per event.
"""

from __future__ import annotations

from typing import Any

import orjson

from backends.anthropic_messages.from_wire import merged_usage, usage_of
from backends.base import ANTHROPIC_MESSAGES
from backends.sse import NativeEvent, SSEEvent
from core.errors import GatewayError
from core.usage import Usage
from gateway.protocols.anthropic_messages.parse import MessagesWire
from gateway.protocols.anthropic_messages.render import usage_block
from gateway.protocols.anthropic_messages.stream import MessagesStream, sse

MESSAGE_STOP = sse("message_stop", {"type": "message_stop"})


def _same(billed: Usage, reported: Usage | None) -> bool:
    """Whether the upstream's own usage says what is billed: the same object's figures
    (a stream's billed usage is the one its events were read into), none corrected."""
    return billed.cache_anomaly is None and billed == reported


def native_message(native: bytes, billed: Usage, corrected: bool) -> bytes:
    """The upstream's message, untouched unless its usage was corrected, or could not
    be read and was counted by us (``estimated``)."""
    if not corrected and not billed.estimated:
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
        self._start_split: Any = None                  # message_start's cache_creation, as sent
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
            return [self._fixed_start(data) or event.native]
        elif kind == "message_delta":
            self._delta, self._delta_raw = data, event.native   # its usage may need correcting
            return []
        elif kind == "message_stop":
            self._stop = event.native  # finish sends it, after message_delta
            return []
        return [event.native]

    def _fixed_start(self, data: dict[str, Any]) -> bytes | None:
        """``message_start`` as sent, unless a cache figure in it is not a count: then
        with that figure read as 0, as it is billed. Anthropic's SDK keeps this event's
        ``cache_creation`` (the writes by lifetime); ``message_delta`` cannot replace it."""
        sent = self._start_usage
        read = usage_of(sent) if isinstance(sent, dict) else None
        if read is None or read.cache_anomaly is None:
            self._start_split = sent.get("cache_creation") if isinstance(sent, dict) else None
            return None
        data["message"]["usage"] = shown = {**sent, **usage_block(read)}
        self._start_split = shown["cache_creation"]
        return sse("message_start", data)

    async def finish(self, usage: Usage) -> list[bytes]:
        if not self.native:
            return await self.translated.finish(usage)
        if self._delta is None:
            return [self._stop]
        reported = usage_of(merged_usage(self._start_usage, self._delta.get("usage")))
        if _same(usage, reported):
            return [self._delta_raw, self._stop]
        sent = self._delta.get("usage")
        fixed = usage_block(usage)
        # Anthropic's delta has no writes by lifetime: only where it had, or where the
        # start's (which the SDK keeps) is not the split billed, for those who read it.
        if not (isinstance(sent, dict) and "cache_creation" in sent) and (
                self._start_split in (None, fixed["cache_creation"])):
            del fixed["cache_creation"]
        self._delta["usage"] = {**(sent if isinstance(sent, dict) else {}), **fixed}
        return [sse("message_delta", self._delta), self._stop]

    def fail(self, exc: GatewayError) -> list[bytes]:
        return self.translated.fail(exc)
