"""A protocol-faithful Anthropic Messages API on loopback, for the suite.

    with run_anthropic_server() as server:
        anthropic.Anthropic(base_url=server.url, api_key=ANTHROPIC_KEY)   # the SDK's base_url
        server.ledger          # every request: headers, body, status, lints, usage
        server.off_spec()      # the requests it refused as Anthropic would (must be [])

Built from Anthropic's published reference as /work/notes/providers.md
quotes it: ``POST /v1/messages`` (answers and SSE streams: message_start,
content_block_start / delta / stop, ping, message_delta, message_stop),
``POST /v1/messages/count_tokens``, ``GET /v1/models``. It refuses
off-spec requests as Anthropic does (``anthropic_spec.py``: 400
``invalid_request_error``, 401 for a bad key, 404 for an unknown model),
counts what it receives with its own tokenizer and keeps a real prompt cache
(``anthropic_model.py``). Its ledger is the tests' independent oracle.

Models (upstream ids), each a behaviour by name like the project's simulator:

    claude-test, claude-other     answer (max output 8192; cacheable from 1024 tokens)
    claude-throttled              429 rate_limit_error, ``retry-after: 7``
    claude-overloaded             529 overloaded_error (no retry-after)
    claude-stream-overloaded      a stream's first event is an ``error`` (overloaded_error)
    claude-midstream-error        a stream breaks with an ``error`` event after some text
                                  (its ledger: the prompt, and the output it sent)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.providers.anthropic_model import (
    PromptCache,
    answer,
    count,
    output_tokens,
    prompt_segments,
)
from tests.providers.anthropic_spec import SpecError, check_headers, check_request, refuse

ANTHROPIC_KEY = "sk-ant-test-0123456789"
MAX_OUTPUT, MIN_CACHEABLE = 8192, 1024
ANSWERING = ("claude-test", "claude-other", "claude-stream-overloaded", "claude-midstream-error")
MODELS = {name: MAX_OUTPUT for name in (*ANSWERING, "claude-throttled", "claude-overloaded")}
KEPT_HEADERS = ("anthropic-version", "anthropic-beta", "content-type")
MAX_BODY = 32 * 1024 * 1024        # Anthropic's Messages API limit


@dataclass
class Exchange:
    """One request the server received, and what it did with it."""

    path: str
    headers: dict[str, str]
    body: Any = None
    status: int = 0
    error: str | None = None          # the error type it answered with
    message: str = ""
    off_spec: bool = False            # refused as Anthropic refuses a malformed request
    lints: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None   # what it answered and billed (a whole answer)
    stream: bool = False


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def error_body(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": request_id}


class AnthropicServer:
    def __init__(self, api_key: str = ANTHROPIC_KEY) -> None:
        self.api_key = api_key
        self.ledger: list[Exchange] = []
        self.cache = PromptCache()
        self.url = ""
        self._ids = itertools.count(1)

    def off_spec(self) -> list[Exchange]:
        return [x for x in self.ledger if x.off_spec]

    def answered(self, model: str | None = None) -> list[Exchange]:
        return [x for x in self.ledger if x.usage is not None
                and (model is None or x.body.get("model") == model)]

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/messages/count_tokens", self.count_tokens)
        app.router.add_get("/v1/models", self.models)
        return app

    async def _checked(self, request: web.Request, exchange: Exchange, counting: bool = False
                       ) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
        version = check_headers(request.headers, self.api_key)
        try:
            body = json.loads(await request.read())
        except ValueError:
            raise refuse("There was an error parsing the body of your request.") from None
        exchange.body = body
        checked = {**body, "max_tokens": 1} if counting and isinstance(body, dict) else body
        turns, exchange.lints = check_request(checked, version, MODELS)
        return body, turns

    def _refused(self, exchange: Exchange, status: int, kind: str, message: str,
                 headers: dict[str, str] | None = None) -> web.Response:
        exchange.status, exchange.error, exchange.message = status, kind, message
        request_id = f"req_{next(self._ids):06d}"
        return web.json_response(error_body(kind, message, request_id), status=status,
                                 headers={"request-id": request_id, **(headers or {})})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        exchange = Exchange(request.path, {k: request.headers[k] for k in KEPT_HEADERS
                                           if k in request.headers})
        self.ledger.append(exchange)
        try:
            body, turns = await self._checked(request, exchange)
        except SpecError as exc:
            exchange.off_spec = True
            return self._refused(exchange, exc.status, exc.kind, exc.message)
        model, exchange.stream = body["model"], bool(body.get("stream"))
        if model == "claude-throttled":
            return self._refused(exchange, 429, "rate_limit_error", "Number of request tokens "
                                 "has exceeded your per-minute rate limit", {"retry-after": "7"})
        if model == "claude-overloaded" or (model == "claude-stream-overloaded"
                                            and not exchange.stream):
            return self._refused(exchange, 529, "overloaded_error", "Overloaded")
        message = self._message(body, turns)
        exchange.status = 200
        if not exchange.stream:
            exchange.usage = message["usage"]
            return web.json_response(message, headers={"request-id": message["id"]})
        return await self._stream(request, message, exchange)

    def _message(self, body: dict[str, Any], turns: list[list[dict[str, Any]]]) -> dict[str, Any]:
        segments = prompt_segments(body, turns)
        cached = self.cache.apply(body["model"], segments, body.get("cache_control"),
                                  MIN_CACHEABLE)
        total = sum(s.tokens for s in segments)
        blocks, reason, sequence = answer(body, turns)
        usage = {"input_tokens": total - cached.read - cached.written,
                 "cache_creation_input_tokens": cached.written,
                 "cache_read_input_tokens": cached.read,
                 "cache_creation": {"ephemeral_5m_input_tokens": cached.written - cached.written_1h,
                                    "ephemeral_1h_input_tokens": cached.written_1h},
                 "output_tokens": output_tokens(blocks), "service_tier": "standard"}
        return {"id": f"msg_{next(self._ids):024d}", "type": "message", "role": "assistant",
                "model": body["model"], "content": blocks, "stop_reason": reason,
                "stop_sequence": sequence, "usage": usage}

    async def _stream(self, request: web.Request, message: dict[str, Any], exchange: Exchange
                      ) -> web.StreamResponse:
        """The message as events; the usage is in the ledger only once it all went out."""
        model = message["model"]
        resp = web.StreamResponse(headers={"content-type": "text/event-stream",
                                           "cache-control": "no-cache",
                                           "request-id": message["id"]})
        await resp.prepare(request)
        overloaded = sse("error", {"type": "error", "error": {"type": "overloaded_error",
                                                              "message": "Overloaded"}})
        if model == "claude-stream-overloaded":
            await resp.write(overloaded)
            return resp
        events = list(stream_events(message))
        for n, event in enumerate(events):
            if n == len(events) - 1:      # message_stop: in the ledger before the client has it
                exchange.usage = message["usage"]
            await resp.write(event)
            if model == "claude-midstream-error" and n == 3:   # after the first text delta
                # What it read and what it sent: the prompt, and the first piece of text.
                first = message["content"][0]
                sent = _pieces(first["text"])[0] if first["type"] == "text" else ""
                exchange.usage = {**message["usage"], "output_tokens": count(sent)}
                await resp.write(overloaded)
                return resp
        await resp.write_eof()
        return resp

    async def count_tokens(self, request: web.Request) -> web.Response:
        exchange = Exchange(request.path, {})
        self.ledger.append(exchange)
        try:
            body, turns = await self._checked(request, exchange, counting=True)
        except SpecError as exc:
            exchange.off_spec = True
            return self._refused(exchange, exc.status, exc.kind, exc.message)
        exchange.status = 200
        return web.json_response({"input_tokens": sum(s.tokens for s in prompt_segments(body,
                                                                                        turns))})

    async def models(self, request: web.Request) -> web.Response:
        data = [{"type": "model", "id": m, "display_name": m,
                 "created_at": "2025-01-01T00:00:00Z"} for m in MODELS]
        return web.json_response({"data": data, "has_more": False, "first_id": data[0]["id"],
                                  "last_id": data[-1]["id"]})


def _pieces(text: str, n: int = 3) -> list[str]:
    """``text`` in about ``n``-word pieces, as a stream delivers it."""
    words = text.split(" ")
    return [" ".join(words[i:i + n]) + (" " if i + n < len(words) else "")
            for i in range(0, len(words), n)] or [""]


def _block_events(index: int, block: dict[str, Any]) -> Iterator[bytes]:
    kind = block["type"]
    start = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": ""},
             "tool_use": {**block, "input": {}}}[kind]
    yield sse("content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": start})
    if index == 0:
        yield sse("ping", {"type": "ping"})
    deltas: list[dict[str, Any]]
    if kind == "text":
        deltas = [{"type": "citations_delta", "citation": c} for c in block.get("citations", [])]
        deltas += [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
    elif kind == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                  {"type": "signature_delta", "signature": block["signature"]}]
    else:
        raw = json.dumps(block["input"])
        third = max(1, len(raw) // 3)
        deltas = [{"type": "input_json_delta", "partial_json": p}
                  for p in ("", raw[:third], raw[third:2 * third], raw[2 * third:])]
    for delta in deltas:
        yield sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": delta})
    yield sse("content_block_stop", {"type": "content_block_stop", "index": index})


def stream_events(message: dict[str, Any]) -> Iterator[bytes]:
    """A message as Anthropic streams it: the usage's input side first, output last."""
    usage = message["usage"]
    start_usage = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                         "cache_read_input_tokens", "cache_creation")
                   if k in usage}
    yield sse("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {**start_usage, "output_tokens": 1}}})
    for index, block in enumerate(message["content"]):
        yield from _block_events(index, block)
    yield sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": {"output_tokens": usage["output_tokens"]}})
    yield sse("message_stop", {"type": "message_stop"})


@contextlib.contextmanager
def run_anthropic_server(api_key: str = ANTHROPIC_KEY) -> Iterator[AnthropicServer]:
    """The server on a free loopback port, in a thread of its own with its own loop."""
    server = AnthropicServer(api_key)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner = web.AppRunner(server.app(), access_log=None)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, name="anthropic-test-server", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the Anthropic test server did not start")
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
