"""One HTTP request and its answer on the raw ASGI interface: reading the body, sending JSON
or a stream, and noticing a client that left.

    http = HTTPExchange(app, scope, receive, send)
    raw = await http.read_body(limit)                   # 413 past limit, 408 when too slow
    await http.send_json(200, body, headers)            # or: await http.send_stream(chunks, headers)

It is the pipeline's ``Responder`` (``gateway/pipeline/serve.py``) for the
doors, and what the edge (``gateway/edge.py``) checks before FastAPI's routes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from core.errors import PayloadTooLarge, RequestTimeout
from gateway.auth import closing
from gateway.pipeline.serve import ClientGone
from gateway.server import BODY_TIMED_OUT

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Handler = Callable[["HTTPExchange"], Awaitable[None]]
T = TypeVar("T")
WATCH_AFTER_S = 0.2   # a non-streamed answer slower than this gets a disconnect watcher
# Comma-separated list headers: several lines of one mean their values joined by ", "
# (RFC 9110 section 5.3). ``cache-control: no-store`` then ``max-age=0`` is both.
LIST_HEADERS = (b"cache-control",)


class HTTPExchange:
    """One HTTP request/response on the raw ASGI interface (a pipeline ``Responder``).

    After the body is read, one watcher task waits for ``http.disconnect``:
    uvicorn drops writes to a closed connection silently, so without it a
    client that leaves would not stop the upstream. Inside ``until_gone`` and
    ``send_stream`` a disconnect cancels the work at once.
    """

    __slots__ = ("scope", "receive", "send", "headers", "app", "gone", "_started",
                 "_responded", "_watcher", "_guarded")

    def __init__(self, app: Any, scope: Scope, receive: Receive, send: Send) -> None:
        self.app = app
        self.scope = scope
        self.receive = receive
        self.send = send
        # Header names arrive lower-cased (ASGI spec); a repeated header keeps its last value,
        # but a list one the gateway reads (LIST_HEADERS) keeps them all (joined_lists).
        raw = scope["headers"]
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
        if len(self.headers) < len(raw):      # some name repeated: rare, so only then
            self.headers.update(joined_lists(raw))
        self.gone = False
        self._started = False
        self._responded = False
        self._watcher: asyncio.Future[Any] | None = None
        self._guarded: asyncio.Task[Any] | None = None

    async def read_body(self, limit: int) -> bytes:
        """The request body, refusing anything over ``limit`` bytes before reading it all.

        The refusals close the connection (``connection: close``), so the rest
        of an oversized body is never read. A body the protocol cut for being
        slow (``gateway/server.py``) is a ``RequestTimeout``, not a client gone.
        """
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(limit, int(declared))
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise timed_out() if self.body_timed_out() else ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def body_timed_out(self) -> bool:
        return bool(self.scope.get(BODY_TIMED_OUT))

    async def send_json(self, status: int, body: bytes, headers: dict[str, str],
                        content_type: bytes = b"application/json") -> None:
        if self._started:    # an error after a stream began is reported inside the stream
            return
        self._started = True
        raw = _raw_headers(headers, (b"content-type", content_type),
                           (b"content-length", b"%d" % len(body)))
        await self.send({"type": "http.response.start", "status": status, "headers": raw})
        self._responded = True
        await self.send({"type": "http.response.body", "body": body})

    async def until_gone(self, work: Awaitable[T]) -> T:
        """Await ``work``; if the client disconnects meanwhile, cancel it and raise ClientGone."""
        if self.gone:
            _discard(work)
            raise ClientGone()
        task = asyncio.current_task()
        assert task is not None
        self._guarded = task
        # Most answers come back before anyone could leave: start watching only
        # when one takes longer (a watcher task per request cost ~5% throughput).
        # A client that left meanwhile is noticed as soon as the watcher starts.
        late = None if self._watcher is not None else (
            asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._watch))
        try:
            return await work
        except asyncio.CancelledError:
            if not self.gone:
                raise
            task.uncancel()
            raise ClientGone() from None
        finally:
            self._guarded = None
            if late is not None:
                late.cancel()

    async def send_stream(self, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> bool:
        """Send an SSE response chunk by chunk; False if the client left before the end."""
        raw = _raw_headers(headers, (b"content-type", b"text/event-stream"),
                           (b"cache-control", b"no-cache"))
        task = self._guard()
        self._started = True
        try:
            await self.send({"type": "http.response.start", "status": 200, "headers": raw})
            async for chunk in chunks:
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
            # Completing the response wakes the watcher with http.disconnect too.
            self._guarded, self._responded = None, True
            await self.send({"type": "http.response.body", "body": b""})
        except asyncio.CancelledError:
            if not self.gone:
                raise
            task.uncancel()
        finally:
            self._guarded = None
            with contextlib.suppress(AttributeError, RuntimeError):
                await aclose(chunks)
        return not self.gone

    def close(self) -> None:
        """Stop watching: the exchange is over."""
        if self._watcher is not None:
            self._watcher.cancel()

    def _guard(self) -> asyncio.Task[Any]:
        task = asyncio.current_task()
        assert task is not None
        self._watch()
        self._guarded = task
        return task

    def _watch(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self._disconnected())
            self._watcher.add_done_callback(self._on_disconnect)

    def _on_disconnect(self, watch: asyncio.Future[Any]) -> None:
        if watch.cancelled() or watch.exception() is not None or self._responded:
            return
        self.gone = True
        if self._guarded is not None:
            self._guarded.cancel()

    async def _disconnected(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass


def _discard(work: Awaitable[Any]) -> None:
    close = getattr(work, "close", None)
    if close is not None:
        close()


def joined_lists(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The ``LIST_HEADERS`` sent on several lines, each as one value joined by ", "."""
    joined = {}
    for name in LIST_HEADERS:
        values = [v.decode("latin-1") for k, v in raw if k == name]
        if len(values) > 1:
            joined[name.decode("latin-1")] = ", ".join(values)
    return joined


def _raw_headers(headers: dict[str, str], *fixed: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [*fixed, *((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())]


async def aclose(chunks: AsyncIterator[bytes]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()


def too_large(limit: int, size: int | None = None) -> PayloadTooLarge:
    what = f"Request body of {size} bytes exceeds" if size is not None else "Request body exceeds"
    return PayloadTooLarge(f"{what} the limit of {limit} bytes.", headers=closing())


def timed_out() -> RequestTimeout:
    return RequestTimeout("The request body did not arrive in time.", headers=closing())
