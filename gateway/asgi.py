"""The hot path in plain ASGI: reading the request and sending the answer.

    app = RouteGate(api, {"/v1/chat/completions": chat_completions})
    # POST /v1/chat/completions -> await chat_completions(HTTPExchange(...)); the rest -> api

``POST /v1/chat/completions`` carries nearly all the traffic. It skips
FastAPI's routing, dependency resolution and exception middleware and
Starlette's ``Request``/``Response`` objects, which cost about as much CPU per
request as routegate's own work (loadtest/README.md). The admin, usage and
meta routes stay ordinary FastAPI routes behind it. The lifespan goes to
FastAPI, so ``app.state.gw`` is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from core.errors import MethodNotAllowed, PayloadTooLarge
from gateway.exchange import new_request_id

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Handler = Callable[["HTTPExchange"], Awaitable[None]]


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class HTTPExchange:
    """One HTTP request/response on the raw ASGI interface."""

    __slots__ = ("scope", "receive", "send", "headers", "app")

    def __init__(self, app: Any, scope: Scope, receive: Receive, send: Send) -> None:
        self.app = app
        self.scope = scope
        self.receive = receive
        self.send = send
        # Header names arrive lower-cased (ASGI spec); a repeated header keeps its last value.
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}

    async def read_body(self, limit: int) -> bytes:
        """The request body, refusing anything over ``limit`` bytes before reading it all."""
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"Request body of {declared} bytes exceeds the limit of {limit}.")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes.")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def respond(self, status: int, body: bytes, headers: dict[str, str],
                      content_type: bytes = b"application/json") -> None:
        raw = _raw_headers(headers, (b"content-type", content_type),
                           (b"content-length", b"%d" % len(body)))
        await self.send({"type": "http.response.start", "status": status, "headers": raw})
        await self.send({"type": "http.response.body", "body": body})

    async def stream(self, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> bool:
        """Send an SSE response chunk by chunk; False if the client left before the end.

        uvicorn drops writes to a closed connection silently, so a watcher
        waits for ``http.disconnect`` and cancels the relay: a client that
        leaves while the upstream is thinking stops the upstream at once.
        """
        raw = _raw_headers(headers, (b"content-type", b"text/event-stream"),
                           (b"cache-control", b"no-cache"))
        task = asyncio.current_task()
        assert task is not None
        gone = False
        relaying = True

        def on_disconnect(watch: asyncio.Future[Any]) -> None:
            nonlocal gone
            if not watch.cancelled() and watch.exception() is None and relaying:
                gone = True
                task.cancel()

        watcher = asyncio.ensure_future(self._disconnected())
        watcher.add_done_callback(on_disconnect)
        try:
            await self.send({"type": "http.response.start", "status": 200, "headers": raw})
            async for chunk in chunks:
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
            # Completing the response wakes the watcher with http.disconnect too.
            relaying = False
            await self.send({"type": "http.response.body", "body": b""})
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()
        finally:
            relaying = False
            watcher.cancel()
            with contextlib.suppress(AttributeError, RuntimeError):
                await aclose(chunks)
        return not gone

    async def _disconnected(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass


def _raw_headers(headers: dict[str, str], *fixed: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [*fixed, *((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())]


async def aclose(chunks: AsyncIterator[bytes]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()


class RouteGate:
    """The served ASGI app: hot routes in plain ASGI, the rest through FastAPI."""

    def __init__(self, api: Any, routes: dict[str, Handler]) -> None:
        self.api = api
        self.state = api.state
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self._routes.get(scope["path"])
            if handler is not None:
                http = HTTPExchange(self, scope, receive, send)
                if scope["method"] == "POST":
                    await handler(http)
                else:
                    error = MethodNotAllowed(f"{scope['path']} accepts POST only.")
                    await http.respond(error.status_code, error.to_json(), {
                        "allow": "POST",
                        "x-request-id": new_request_id(http.headers.get("x-request-id"))})
                return
        await self.api(scope, receive, send)
