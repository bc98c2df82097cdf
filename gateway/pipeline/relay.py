"""Relaying an upstream stream to the client, byte-exact.

    relay = StreamRelay(stream, include_usage=chat.include_usage, max_events=2_200)
    sent_all = await responder.send_stream(relay.events(), headers)
    relay.chunks, relay.error, stream.usage

Events that arrived together leave together (one ASGI send per upstream
read, not per event). The usage chunk the gateway asked for is dropped when
the client did not ask for it. An upstream failure after the headers went
out (a broken stream, or one that ended without ``[DONE]``) becomes an
in-stream OpenAI error event, which the SDK raises: a truncated stream never
looks complete. So does a stream that runs past ``max_events``
(``Demand.stream_event_cap``: more than the request can be billed for): an
endless stream is cut there, and billed for what was relayed. Given a
``keep`` list (a stream sampled for a shadow answer), the relay also keeps
each answer event in it, as many as ``max_events``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from backends.base import ChunkStream
from backends.sse import SSEEvent
from core.errors import GatewayError, UpstreamTooLong
from core.types import Usage
from gateway.money.ceiling import Ceiling, checked_usage_event, within
from gateway.protocols.base import StreamTranslator


def error_event(exc: GatewayError) -> bytes:
    return b"data: " + exc.to_json() + b"\n\n"


def too_long(max_events: int) -> UpstreamTooLong:
    return UpstreamTooLong(f"The upstream's stream ran past {max_events} events, more than "
                           "this request can be billed for; it was cut.")


class StreamRelay:
    """One upstream stream to the client: OpenAI's chunks as they are, or through
    the door's ``translator`` into its own events (Responses, Anthropic, ...)."""

    def __init__(self, stream: ChunkStream, *, include_usage: bool, max_events: int,
                 ceiling: Ceiling | None = None, ours: int = 0,
                 translator: StreamTranslator | None = None,
                 keep: list[SSEEvent] | None = None) -> None:
        self.stream = stream
        self.keep = keep                     # a list: every answer event is kept in it too
        self.drop_usage = not include_usage
        self.max_events = max_events         # past this the stream is cut (too_long)
        self.ceiling, self.ours = ceiling, ours   # to check the usage the client is shown
        self.translator = translator
        self.chunks = 0                      # token-bearing chunks relayed
        self.error: GatewayError | None = None

    def events(self) -> AsyncIterator[bytes]:
        return self._passthrough() if self.translator is None else self._translated(
            self.translator)

    async def _passthrough(self) -> AsyncIterator[bytes]:
        out: list[bytes] = []
        drop_usage = self.drop_usage
        left = self.max_events
        keep = self.keep
        try:
            try:
                async for event in self.stream:
                    left -= 1
                    if left < 0:
                        raise too_long(self.max_events)
                    if not event.is_usage_only:
                        self.chunks += event.has_tokens
                        out.append(event.raw)
                        if keep is not None:
                            keep.append(event)
                    elif not drop_usage:
                        out.append(self._usage(event))
                    if out and not self.stream.buffered:
                        yield b"".join(out)
                        out.clear()
            except GatewayError as exc:
                self.error = exc
                out.append(error_event(exc))
            if out:
                yield b"".join(out)
        finally:
            # A client that disconnects cancels this generator: close the
            # upstream all the same, which cancels its generation (aclose
            # drops or returns the connection even if cancelled itself).
            await self.stream.aclose()

    async def _translated(self, translator: StreamTranslator) -> AsyncIterator[bytes]:
        out: list[bytes] = []
        left = self.max_events
        reported: dict | None = None
        keep = self.keep
        try:
            try:
                async for event in self.stream:
                    left -= 1
                    if left < 0:
                        raise too_long(self.max_events)
                    if event.is_usage_only:
                        reported = event.data
                    elif not event.done:
                        self.chunks += event.has_tokens
                        out.extend(translator.feed(event))
                        if keep is not None:
                            keep.append(event)
                    if out and not self.stream.buffered:
                        yield b"".join(out)
                        out.clear()
                out.extend(await translator.finish(self._billed(reported)))
            except GatewayError as exc:
                self.error = exc
                out.extend(translator.fail(exc))
            if out:
                yield b"".join(out)
        finally:
            await self.stream.aclose()

    def _usage(self, event: SSEEvent) -> bytes:
        if self.ceiling is None or event.data is None:
            return event.raw
        return checked_usage_event(event.data, event.raw, self.ceiling, self.ours, self.chunks)

    def _billed(self, usage_chunk: dict | None) -> Usage:
        """What the stream will be billed, for the door's closing events."""
        reported = Usage.from_wire(usage_chunk.get("usage")) if usage_chunk else None
        if self.ceiling is None:
            return reported or Usage(self.ours, self.chunks, estimated=True)
        return within(self.ceiling, reported, self.ours, self.chunks)[0]
