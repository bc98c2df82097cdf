"""One HTTP/1.1 upstream connection: an asyncio protocol driving httptools.

``backends.http1.ConnectionPool`` opens and reuses these. Each connection
feeds socket reads straight to httptools' C parser (the one uvicorn uses) and
hands body bytes to its ``LeanResponse`` without copying them; the head and
body size caps and the 1xx handling live here, in the parser callbacks.
"""

from __future__ import annotations

import asyncio
import collections
import time

import httptools

from backends.transport import ProtocolError, ResponseTooLarge
from core.config import TransportConfig

HIGH_WATER = 1 << 20        # pause reading when this much body is buffered unread


class LeanResponse:
    """One response, its body delivered as the connection reads it."""

    __slots__ = ("status", "headers", "_conn", "_chunks", "_buffered", "_received", "_waiter",
                 "_done", "_exc", "_released")

    def __init__(self, conn: Connection) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._conn = conn
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._received = 0
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._exc: BaseException | None = None
        self._released = False

    @property
    def done(self) -> bool:
        return self._done

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def readany(self) -> bytes:
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self._done:
                return b""
            await self._wait()
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered >= HIGH_WATER:
            self._conn.resume_reading()
        self._buffered = 0
        return data

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        self.release()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._done and self._exc is None:
            self._conn.reusable()
        else:
            self._conn.close()

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._conn.close()


class Connection(asyncio.Protocol):
    def __init__(self, config: TransportConfig, host: Host) -> None:
        self.host = host
        self.max_head = config.max_header_bytes
        self.max_body = config.max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: LeanResponse | None = None
        self.headers_ready: asyncio.Future[None] | None = None
        self.closed = False
        self.counted = False         # holds one of the host's slots, once handed out
        self.requests = 0
        self.idle_since = time.monotonic()
        self._keep_alive = False
        self._head_bytes = 0
        self._field_bytes = 0
        self._interim = False
        self._failure: BaseException | None = None

    # -- asyncio protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        resp = self.response
        if resp is None:      # bytes nobody asked for: the stream is out of sync
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(self._failure or ProtocolError(f"invalid HTTP response: {exc}"))
            return
        if not resp.status:   # still in the head (interim responses included)
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head:
                self._fail(ResponseTooLarge(f"response head over {self.max_head} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        resp = self.response
        if resp is not None and not resp._done:
            if resp.status and exc is None and "content-length" not in resp.headers \
                    and "chunked" not in resp.headers.get("transfer-encoding", ""):
                self._complete(reuse=False)      # a body delimited by closing the connection
            else:
                self._fail(ConnectionResetError("upstream closed the connection"))
        self.close()

    # -- httptools callbacks ----------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.response is not None
        # A head that arrives in one read is counted here (data_received counts
        # only reads that leave the head incomplete).
        self._field_bytes += len(name) + len(value)
        self.response.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        resp = self.response
        assert resp is not None
        status = self.parser.get_status_code()
        if status < 200:
            if status == 101:
                self._failure = ProtocolError("the upstream switched protocols")
                raise self._failure
            self._interim = True          # 100 Continue, 103 Early Hints: the answer follows
            resp.headers.clear()
            return
        if self._field_bytes > self.max_head:
            self._failure = ResponseTooLarge(f"response head over {self.max_head} bytes")
            raise self._failure
        length = resp.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._failure = ResponseTooLarge(f"response body over {self.max_body} bytes")
            raise self._failure
        resp.status = status
        if self.headers_ready is not None and not self.headers_ready.done():
            self.headers_ready.set_result(None)

    def on_body(self, body: bytes) -> None:
        resp = self.response
        assert resp is not None
        resp._received += len(body)
        if resp._received > self.max_body:
            self._failure = ResponseTooLarge(f"response body over {self.max_body} bytes")
            raise self._failure
        resp._chunks.append(body)
        resp._buffered += len(body)
        if resp._buffered >= HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
        resp._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._complete(reuse=self.parser.should_keep_alive())

    # -- state -------------------------------------------------------------
    def _complete(self, reuse: bool) -> None:
        resp = self.response
        assert resp is not None
        self._keep_alive = reuse
        resp._done = True
        resp._wake()
        if resp._released:
            self.reusable()

    def _fail(self, exc: BaseException) -> None:
        resp = self.response
        if resp is not None and not resp._done:
            resp._exc = exc
            resp._wake()
            ready = self.headers_ready
            if ready is not None and not ready.done():
                ready.set_exception(exc)
                ready.exception()   # retrieved here, so an abandoned request logs nothing
        self.close()

    def send(self, head: bytes, body: bytes) -> LeanResponse:
        assert self.transport is not None
        self.requests += 1
        self._head_bytes = self._field_bytes = 0
        self.response = LeanResponse(self)
        self.headers_ready = asyncio.get_running_loop().create_future()
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)
        return self.response

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def reusable(self) -> None:
        """The response was read to its end and released: free the connection."""
        resp = self.response
        if resp is None or not resp._done or not resp._released:
            return
        self.response = None
        self.headers_ready = None
        if self._keep_alive and not self.closed:
            self.host.give_back(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        if self.counted:
            self.counted = False
            self.host.free_slot()


class Host:
    """The connections to one origin: idle ones (most recent last), how many
    are open, and the requests waiting for one."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[Connection] = []
        self.open = 0
        # Each waiter is resolved with an idle connection handed over, or with
        # None: a slot was freed for it and it may open a connection.
        self.waiters: collections.deque[asyncio.Future[Connection | None]] = collections.deque()

    def pop_idle(self, idle_s: float) -> Connection | None:
        idle = self.idle
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < idle_s:
                return conn
            conn.close()
        return None

    def give_back(self, conn: Connection) -> None:
        """A connection is free again: to the first waiter, else parked."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def free_slot(self) -> None:
        """A connection closed (or was never opened): its slot goes to a waiter, else away."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.open -= 1
