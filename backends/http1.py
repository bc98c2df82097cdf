"""A lean HTTP/1.1 client for upstream calls: pooled keep-alive connections.

    pool = ConnectionPool()
    origin = Origin.parse("http://127.0.0.1:8000/v1")
    resp = await pool.request(origin, b"POST", "/v1/chat/completions", headers, body,
                              connect_timeout=5.0)        # returns once the headers arrived
    resp.status, resp.headers
    body = await resp.read()                               # whole body; connection back to the pool
    chunk = await resp.readany()                           # or: what arrived so far, b"" at the end
    resp.release()  /  resp.close()                        # done with it / abandon (drops the connection)

Each connection is an asyncio protocol driving httptools' C parser (the one
uvicorn uses); nothing is copied between a socket read and the caller but
the bytes themselves. On this 2-core machine aiohttp's ``ClientSession``
took about a quarter of the gateway's CPU per request (loadtest/README.md);
this does the same job (keep-alive, chunked bodies, TLS, flow control) for
the one thing the gateway needs: JSON requests to OpenAI-compatible servers.

Failures raise ``OSError`` (``ConnectionError`` subclasses) or
``TimeoutError``; the backend converts them at its edge.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

KEEPALIVE_S = 60.0          # idle connections older than this are not reused
HIGH_WATER = 1 << 20        # pause reading when this much body is buffered unread


class ProtocolError(ConnectionError):
    """The upstream sent something that is not HTTP/1.1."""


class ConnectError(ConnectionError):
    """No connection could be opened (refused, unresolvable, unreachable)."""


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    path: str                # base path without a trailing slash, e.g. "/v1"
    host_header: bytes

    @classmethod
    def parse(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        default = (parts.scheme == "https" and port == 443) or (parts.scheme == "http" and port == 80)
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        host_header = host if default else f"{host}:{port}"
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"),
                   host_header.encode("idna"))


class Response:
    """One response, its body delivered as the connection reads it."""

    __slots__ = ("status", "headers", "_conn", "_chunks", "_buffered", "_waiter", "_done",
                 "_exc", "_released")

    def __init__(self, conn: _Connection) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._conn = conn
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._exc: BaseException | None = None
        self._released = False

    @property
    def done(self) -> bool:
        """The whole body has arrived."""
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
        """The body bytes that arrived since the last call; b"" once it is complete."""
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
        """The rest of the body; the connection goes back to the pool."""
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        self.release()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def release(self) -> None:
        """Done with this response: a complete one frees its connection for reuse,
        an incomplete one closes it (which is how an upstream learns to stop)."""
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


class _Connection(asyncio.Protocol):
    def __init__(self, pool: ConnectionPool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.headers_ready: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self._keep_alive = False

    # -- asyncio protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.response is None:      # bytes nobody asked for: the stream is out of sync
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"invalid HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        resp = self.response
        if resp is not None and not resp._done:
            if resp.status and exc is None and "content-length" not in resp.headers \
                    and "chunked" not in resp.headers.get("transfer-encoding", ""):
                self._complete(reuse=False)      # a body delimited by closing the connection
            else:
                self._fail(ConnectionResetError("upstream closed the connection"))

    # -- httptools callbacks ----------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.response is not None
        self.response.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self.response is not None
        self.response.status = self.parser.get_status_code()
        if self.headers_ready is not None and not self.headers_ready.done():
            self.headers_ready.set_result(None)

    def on_body(self, body: bytes) -> None:
        resp = self.response
        assert resp is not None
        resp._chunks.append(body)
        resp._buffered += len(body)
        if resp._buffered >= HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
        resp._wake()

    def on_message_complete(self) -> None:
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

    def send(self, head: bytes, body: bytes) -> Response:
        assert self.transport is not None
        self.response = Response(self)
        self.headers_ready = asyncio.get_running_loop().create_future()
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)
        return self.response

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def reusable(self) -> None:
        """The response was read to its end and released: park the connection."""
        resp = self.response
        if resp is None or not resp._done or not resp._released:
            return
        self.response = None
        self.headers_ready = None
        if self._keep_alive and not self.closed:
            self.idle_since = time.monotonic()
            self.pool._park(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Idle keep-alive connections per origin, most recently used first."""

    def __init__(self, keepalive_s: float = KEEPALIVE_S,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[Origin, list[_Connection]] = {}
        self._keepalive_s = keepalive_s
        self._ssl = ssl_context   # None: the system's trust store, made on first use

    def _park(self, conn: _Connection) -> None:
        self._idle.setdefault(conn.origin, []).append(conn)

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        ssl_context = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_context = self._ssl
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, origin), origin.host, origin.port, ssl=ssl_context)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectError(f"cannot connect: {type(exc).__name__}") from exc
        return conn

    def _reuse(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive_s:
                return conn
            conn.close()
        return None

    async def request(self, origin: Origin, method: bytes, path: str, headers: bytes,
                      body: bytes, connect_timeout: float | None = None) -> Response:
        """Send one request; returns when the response's headers are in.

        ``headers`` are complete header lines (``b"name: value\\r\\n"`` each);
        host and content-length are added here. A reused connection that the
        upstream had closed before answering a single byte (the keep-alive
        race) is retried once on a new connection.
        """
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\n%s\r\n" % (
            method, path.encode("latin-1"), origin.host_header, len(body), headers)
        for _ in range(2):
            conn = self._reuse(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, connect_timeout)
            resp = conn.send(head, body)
            try:
                assert conn.headers_ready is not None
                await conn.headers_ready
                return resp
            except ConnectionResetError:
                if reused and not resp.status and not resp._chunks:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
        raise ConnectionResetError("upstream closed the connection")

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
