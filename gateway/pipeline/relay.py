"""Relaying an upstream stream to the client, byte-exact.

    relay = StreamRelay(stream, include_usage=chat.include_usage, max_events=2_200)
    sent_all = await responder.send_stream(relay.events(), headers)
    relay.chunks, relay.text, relay.error, stream.usage

Events that arrived together leave together (one ASGI send per upstream
read, not per event). The usage chunk the gateway asked for is dropped when
the client did not ask for it; usage in a chunk with choices (Mistral's
finish chunk, GLM's every chunk) is checked as a usage chunk is, and a
translating door closes on the usage the stream read: the one settling
bills. An upstream failure after the headers went out (a broken stream, or
one that ended without ``[DONE]``) becomes an in-stream OpenAI error event,
which the SDK raises: a truncated stream never looks complete. So does a stream that runs past ``max_events``
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
from core.usage import Usage
from gateway.money.ceiling import Ceiling, checked_usage_event, within
from gateway.money.metering import count_relayed_tokens
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
        self.text: list[str] = []            # what they carried (a stream cut short bills it)
        self.usage_seen = False              # a usage chunk came (readable or not)
        self._counted_pieces = self._counted_tokens = 0   # tokens_so_far's running count
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
                        text = event.generated
                        if text:
                            self.chunks += 1
                            self.text.append(text)
                        data = event.data
                        if data is not None and data.get("usage") is not None:
                            # Usage in a chunk with choices (Mistral's finish chunk,
                            # GLM's every chunk): checked as a usage chunk is.
                            self.usage_seen = True
                            out.append(self._usage(event))
                        else:
                            out.append(event.raw)
                        if keep is not None:
                            keep.append(event)
                    else:
                        self.usage_seen = True
                        if not drop_usage:
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
        keep = self.keep
        try:
            try:
                async for event in self.stream:
                    left -= 1
                    if left < 0:
                        raise too_long(self.max_events)
                    if event.is_usage_only:
                        self.usage_seen = True
                    elif not event.done:
                        text = event.generated
                        if text:
                            self.chunks += 1
                            self.text.append(text)
                        data = event.data
                        if data is not None and data.get("usage") is not None:
                            self.usage_seen = True    # in a chunk with choices: billed too
                        out.extend(translator.feed(event))
                        if keep is not None:
                            keep.append(event)
                    if out and not self.stream.buffered:
                        yield b"".join(out)
                        out.clear()
                out.extend(await translator.finish(self._billed()))
            except GatewayError as exc:
                self.error = exc
                out.extend(translator.fail(exc))
            if out:
                yield b"".join(out)
        finally:
            await self.stream.aclose()

    def tokens_so_far(self) -> int:
        """Our count of what has been relayed up to now, counted piece by piece as it
        grows (a lease renewal asks every few seconds): what a replica that dies
        mid-stream is billed for."""
        if self.ceiling is None:
            return self.chunks
        pieces = self.text[self._counted_pieces:]
        if pieces:
            self._counted_pieces += len(pieces)
            self._counted_tokens += count_relayed_tokens(pieces, self.ceiling.model.tokenizer)
        return self._counted_tokens

    def _relayed_tokens(self) -> int:
        """Our count of what was relayed, as settling counts it (no usable usage came)."""
        if self.ceiling is None or not self.text:
            return self.chunks
        return count_relayed_tokens(self.text, self.ceiling.model.tokenizer)

    def _usage(self, event: SSEEvent) -> bytes:
        if self.ceiling is None or event.data is None:
            return event.raw
        return checked_usage_event(event.data, event.raw, self.ceiling, self.ours,
                                   self._relayed_tokens)

    def _billed(self) -> Usage:
        """What the stream will be billed, for the door's closing events: the usage the
        stream read (``stream.usage``: the one settling bills, from whichever chunk
        carried it, with the cache's reads and writes), through the same check."""
        reported = self.stream.usage
        if self.ceiling is None:
            return (reported if reported is not None
                    else Usage(self.ours, self._relayed_tokens(), estimated=True))
        if reported is not None and min(reported.prompt_tokens, reported.completion_tokens) >= 0:
            return within(self.ceiling, reported, self.ours, 0)[0]
        return within(self.ceiling, None, self.ours, self._relayed_tokens())[0]
