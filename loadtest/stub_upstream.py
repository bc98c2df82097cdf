"""A very fast OpenAI-compatible stub upstream for proxy benchmarks.

    python -m loadtest.stub_upstream --port 9100

It answers ``POST /v1/chat/completions`` with a fixed small ``chat.completion``
(with usage), or, when the body asks for ``"stream": true``, a fixed SSE stream
of ten content chunks, a usage chunk (only with ``stream_options.include_usage``)
and ``data: [DONE]``, all at once: no sleeps, no model. ``GET /v1/models`` and
``GET /health`` answer too, so a gateway's readiness check passes.

It is a raw asyncio protocol on uvloop with httptools' C parser rather than an
ASGI app, so that on a 2-core machine it takes as little CPU as possible away
from the proxy being measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import cast

import httptools
import orjson

CHUNKS = 10
MODEL = "stub"


def _completion() -> bytes:
    return orjson.dumps({
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 1700000000, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hello there, how are you?"}}],
        "usage": {"prompt_tokens": 14, "completion_tokens": CHUNKS, "total_tokens": 14 + CHUNKS},
    })


def _event(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _sse(include_usage: bool) -> bytes:
    """The whole stream as HTTP/1.1 chunked body: one chunk per SSE event."""
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1700000000,
            "model": MODEL}
    events = [_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                "content": ""}}]})]
    for i in range(CHUNKS):
        events.append(_event({**base, "choices": [{"index": 0, "delta": {"content": f" w{i}"}}]}))
    events.append(_event({**base, "choices": [{"index": 0, "delta": {},
                                               "finish_reason": "stop"}]}))
    if include_usage:
        events.append(_event({**base, "choices": [], "usage": {
            "prompt_tokens": 14, "completion_tokens": CHUNKS, "total_tokens": 14 + CHUNKS}}))
    events.append(b"data: [DONE]\n\n")
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def _response(status: bytes, content_type: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type
            + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


COMPLETION = _response(b"200 OK", b"application/json", _completion())
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
               b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
STREAM = STREAM_HEAD + _sse(include_usage=False)
STREAM_WITH_USAGE = STREAM_HEAD + _sse(include_usage=True)
MODELS = _response(b"200 OK", b"application/json", orjson.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "stub"}]}))
HEALTH = _response(b"200 OK", b"application/json", b'{"status":"ok"}')
NOT_FOUND = _response(b"404 Not Found", b"application/json",
                      b'{"error":{"message":"not found","type":"invalid_request_error"}}')
BAD_JSON = _response(b"400 Bad Request", b"application/json",
                     b'{"error":{"message":"bad JSON","type":"invalid_request_error"}}')


def answer(method: bytes, url: bytes, body: bytes) -> bytes:
    path = url.split(b"?", 1)[0]
    if method == b"POST" and path.endswith(b"/chat/completions"):
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return BAD_JSON
        if not request.get("stream"):
            return COMPLETION
        options = request.get("stream_options") or {}
        return STREAM_WITH_USAGE if options.get("include_usage") else STREAM
    if path.endswith(b"/models"):
        return MODELS
    if path in (b"/health", b"/healthz"):
        return HEALTH
    return NOT_FOUND


class StubProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive and pipelining; one fixed answer per request."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.transport.write(answer(self.parser.get_method(), self.url, b"".join(self.body)))
        if not self.parser.should_keep_alive():
            self.transport.close()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(StubProtocol, host, port, backlog=1024)
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    async with server:
        await stopping.wait()


def main(argv: list[str] | None = None) -> None:
    """python -m loadtest.stub_upstream --port 9100"""
    parser = argparse.ArgumentParser(description="fast OpenAI-compatible stub upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 9100)))
    args = parser.parse_args(argv)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
