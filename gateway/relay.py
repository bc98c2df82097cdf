"""Relaying an upstream stream to the client, byte-exact.

    relay = StreamRelay(chat, features, model, stream)
    SettledStreamingResponse(relay.events(), on_sent=lambda: relay.finish(ex))

Events that arrived together leave together (one ASGI send per upstream
read, not per event). The usage chunk the gateway asked for is dropped when
the client did not ask for it. An upstream failure after the headers went
out becomes an in-stream error event, which OpenAI's SDK raises.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from backends.base import ChunkStream, Usage
from core.config import ModelConfig
from core.errors import GatewayError
from gateway.exchange import Exchange
from gateway.features import RequestFeatures
from gateway.request import ChatRequest


def error_event(exc: GatewayError) -> bytes:
    return b"data: " + exc.to_json() + b"\n\n"


class StreamRelay:
    def __init__(self, chat: ChatRequest, features: RequestFeatures, model: ModelConfig,
                 stream: ChunkStream) -> None:
        self.chat = chat
        self.features = features
        self.model = model
        self.stream = stream
        self.chunks = 0
        self.error: GatewayError | None = None

    async def events(self) -> AsyncIterator[bytes]:
        out: list[bytes] = []
        drop_usage = not self.chat.include_usage
        try:
            try:
                async for event in self.stream:
                    if not (drop_usage and event.is_usage_only):
                        self.chunks += event.has_tokens
                        out.append(event.raw)
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

    def usage(self) -> Usage:
        """The upstream's usage; when the stream ended without it (client gone,
        upstream broke), what was generated: one token per relayed chunk."""
        if self.stream.usage is not None:
            return self.stream.usage
        prompt = self.features.prompt_tokens(self.model.tokenizer)
        return Usage(prompt, self.chunks, estimated=True)

    async def finish(self, ex: Exchange) -> None:
        await self.stream.aclose()   # no-op unless the body was never iterated
        await ex.finish(self.model, self.usage(), ttft_s=self.stream.ttft_s or None,
                        tpot_s=self.stream.tpot_s, error=self.error)
