"""An open Messages stream, read as chat chunks (or relayed natively), metered.

    stream = MessagesChunkStream(backend, resp, meter, replica, ChatChunks(...), native=None)
    await stream.prime()                  # up to its first chunk (an early error falls back)
    async for event in stream: ...        # SSEEvent chat chunks, then the usage chunk, [DONE]

Anthropic's events are read as ``backends/stream.py`` reads OpenAI's (the
same reads, timeouts and connection handling) and translated one by one
(``events.py``). A stream is complete only once ``message_stop`` came; one
that ends before it raises ``upstream_stream_truncated``. An ``error`` event
raises the gateway's error: before the first chunk is given out (``prime``)
the gateway can still fall back, after it the relay ends the client's stream.

Relayed natively (``native``: the door's protocol), every event is a
``NativeEvent``: Anthropic's own bytes for the door, beside their chat
chunk (or None) for the pipeline; ``message_start`` names the configured
model, and ``message_stop`` comes on its own, before the usage chunk (which
the relay never hands the door), so every event reaches the door as it was.
The usage is Anthropic's, read from ``message_start`` and ``message_delta``
(cache reads and writes apart). ``message_start``'s count of the prompt is
kept apart (``prompt_seen``): a stream that breaks, or that the client
leaves, before ``message_stop`` bills its prompt as Anthropic counted it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson

from backends.anthropic_messages.events import ChatChunks
from backends.sse import DONE, NativeEvent, SSEEvent
from backends.stream import HTTPChunkStream, StreamMeter, StreamOwner
from backends.transport import Response
from core.errors import UpstreamError
from core.usage import Usage


class MessagesChunkStream(HTTPChunkStream):
    def __init__(self, backend: StreamOwner, resp: Response, meter: StreamMeter,
                 replica: int, chunks: ChatChunks, native: str | None = None) -> None:
        super().__init__(backend, resp, meter, replica)
        self._chunks = chunks
        self._native = native            # the door's protocol, when relaying natively
        self._ready: list[SSEEvent] = []

    @property
    def buffered(self) -> bool:
        return bool(self._ready) or bool(self._pending)

    @property
    def prompt_seen(self) -> Usage | None:
        """``message_start``'s count of the prompt (input, cache reads and writes), with
        ``message_delta``'s where it came; a delta that cannot be read leaves the start's."""
        return self._chunks.usage or self._chunks.start_usage

    async def prime(self) -> None:
        while not self._ready:
            if not self._pending and not await self._read_events():
                raise UpstreamError(f"model {self._backend.name} closed the stream without data")
            self._translate(self._pending.pop(0))

    def _translate(self, raw: bytes) -> None:
        """One upstream event into the events given out (a GatewayError for ``error``)."""
        event = SSEEvent.parse(raw)
        data = event.data
        if data is None or self._chunks.finished:
            return                       # a comment, or anything after message_stop
        chunk = self._chunks.feed(data)
        if self._native is not None:
            kind = data.get("type")
            if kind == "message_start" and isinstance(data.get("message"), dict):
                data["message"]["model"] = self._chunks.model   # the configured name
                raw = b"event: message_start\ndata: " + orjson.dumps(data) + b"\n\n"
            elif kind == "message_stop":     # for the door; the usage chunk then on its own
                self._ready.append(NativeEvent(b"", None, native=raw, protocol=self._native))
                raw = b""
            self._ready.append(NativeEvent(SSEEvent.from_data(chunk).raw if chunk else b"",
                                           chunk, native=raw, protocol=self._native))
        elif chunk is not None:
            self._ready.append(SSEEvent.from_data(chunk))
        if self._chunks.finished:
            self._ready.append(SSEEvent(DONE, None, done=True))

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        try:
            while True:
                while not self._ready:
                    if not self._pending:
                        async with asyncio.timeout(self._backend.between_s):
                            if not await self._read_events():
                                raise UpstreamError(
                                    f"model {self._backend.name} ended the stream without "
                                    "message_stop", code="upstream_stream_truncated")
                    self._translate(self._pending.pop(0))
                event = self._ready.pop(0)
                self._meter.observe(event)
                if event.is_usage_only:      # the meter read OpenAI's fields; these are exact
                    self._meter.usage = self._chunks.usage
                yield event
                if event.done:
                    return
        except (TimeoutError, OSError) as exc:   # only network failures; a bug propagates
            err = self._backend.convert(exc, mid_stream=True)
            assert err is not None
            raise err from None
