"""The lean HTTP/1.1 transport: pooled keep-alive connections on httptools.

    pool = ConnectionPool(TransportConfig(max_connections=64))
    origin = Origin.parse("http://127.0.0.1:8000/v1")
    resp = await pool.request(origin, b"POST", "/v1/chat/completions", headers, body, timeouts)
    body = await resp.read()                               # see backends/transport.py

Each connection (``backends/http1_wire.py``) is an asyncio protocol driving
httptools' C parser (the one uvicorn uses); nothing is copied between a
socket read and the caller but the bytes themselves. On this 2-core machine aiohttp's ``ClientSession``
took about a quarter of the gateway's CPU per request (loadtest/README.md);
this does the same job for the one thing the gateway needs: JSON requests
to OpenAI-compatible servers.

Limits (``core.config.TransportConfig``), each tested in tests/backends:

- at most ``max_connections`` open connections per origin; a request beyond
  them waits in a queue of at most ``max_queue``, for at most
  ``timeouts.pool_wait_s``, else ``PoolSaturated`` (a 503 at the edge);
- a response head over ``max_header_bytes`` or a body over ``max_body_bytes``
  raises ``ResponseTooLarge`` and drops the connection;
- interim 1xx responses (100 Continue, 103 Early Hints) are skipped;
- an idle connection is not reused after ``idle_s`` (keep it below the
  upstream's keep-alive, so the upstream never closes one under a request);
- DNS answers are cached for ``dns_ttl_s`` (0: resolve on every connect).

Not supported (use the aiohttp transport): proxies (``HTTP(S)_PROXY`` are
ignored), HTTP/2, redirects, ``101 Switching Protocols``, response
compression (no ``accept-encoding`` is sent), client certificates, and
request bodies streamed from an iterator.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from backends.dns import Resolver
from backends.http1_wire import Connection, Host, LeanResponse
from backends.transport import (
    ConnectError,
    Origin,
    PoolSaturated,
)
from core.config import Timeouts, TransportConfig

DEFAULT_TIMEOUTS = Timeouts()

__all__ = ["ConnectionPool", "LeanResponse", "Origin"]


class ConnectionPool:
    """The lean ``Transport``: keep-alive connections per origin, capped."""

    def __init__(self, config: TransportConfig | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.config = config or TransportConfig()
        self._hosts: dict[Origin, Host] = {}
        self._idle_s = self.config.idle_s
        self._ssl = ssl_context   # None: the system's trust store, made on first use
        self._dns = Resolver(self.config.dns_ttl_s)

    async def request(self, origin: Origin, method: bytes, path: str, headers: bytes,
                      body: bytes, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> LeanResponse:
        """Send one request; returns when the final response's head is in.

        A reused connection that the upstream had closed before answering a
        single byte (the keep-alive race) is retried once on another connection.
        That retry's connection refused is the reset, not a ``ConnectError``: the request
        was sent, and may have been read (a replica that died with it), so it must not
        be placed on another replica as one that reached nothing.
        """
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\n%s\r\n" % (
            method, path.encode("latin-1"), origin.host_header, len(body), headers)
        host = self._hosts.get(origin)
        if host is None:
            host = self._hosts[origin] = Host()
        reset: ConnectionResetError | None = None     # the reused connection's, retried
        for _ in range(2):
            # The common case, an idle connection, without a coroutine call.
            conn = host.pop_idle(self._idle_s) if host.idle else None
            if conn is None:
                try:
                    conn = await self._acquire(origin, host, timeouts)
                except ConnectError:
                    if reset is not None:
                        raise reset from None
                    raise
            reused = conn.requests > 0
            resp = conn.send(head, body)
            try:
                assert conn.headers_ready is not None
                await conn.headers_ready
                return resp
            except ConnectionResetError as exc:
                if reused and not resp.status and not resp._chunks:
                    reset = exc
                    continue
                raise
            except BaseException:
                conn.close()
                raise
        raise ConnectionResetError("upstream closed the connection")

    async def _acquire(self, origin: Origin, host: Host, timeouts: Timeouts) -> Connection:
        """An idle connection, or a new one under the cap, or one a waiter is handed."""
        while True:
            conn = host.pop_idle(self._idle_s)
            if conn is not None:
                return conn
            if host.open < self.config.max_connections:
                host.open += 1
                break
            conn = await self._wait(host, timeouts.pool_wait_s)
            if conn is None:
                break                      # a slot was handed over: connect on it
            if not conn.closed:            # (the upstream may have closed it meanwhile)
                return conn
        try:
            conn = await self._connect(origin, host, timeouts.connect_s)
        except BaseException:
            host.free_slot()               # the slot this request held
            raise
        conn.counted = True                # from now on its close() frees the slot
        return conn

    async def _wait(self, host: Host, wait_s: float) -> Connection | None:
        """Queue for a connection; returns one handed over, or None for a free slot."""
        if len(host.waiters) >= self.config.max_queue:
            raise PoolSaturated(f"{host.open} connections busy and {len(host.waiters)} waiting")
        waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
        host.waiters.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                return await waiter
        except BaseException as exc:
            with contextlib.suppress(ValueError):
                host.waiters.remove(waiter)
            if waiter.done() and not waiter.cancelled():   # granted as we gave up: pass it on
                granted = waiter.result()
                if granted is None:
                    host.free_slot()
                elif not granted.closed:
                    host.give_back(granted)
            if isinstance(exc, TimeoutError):
                raise PoolSaturated(f"no connection free within {wait_s} s") from None
            raise

    async def _connect(self, origin: Origin, host: Host, timeout: float) -> Connection:
        loop = asyncio.get_running_loop()
        ssl_context = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_context = self._ssl
        try:
            async with asyncio.timeout(timeout):
                try:
                    addresses = await self._dns.resolve(origin.host, origin.port)
                except OSError as exc:
                    raise ConnectError(f"cannot resolve the upstream: {type(exc).__name__}") from exc
                error: OSError | None = None
                for address in addresses:
                    try:
                        _, conn = await loop.create_connection(
                            lambda: Connection(self.config, host), address, origin.port, ssl=ssl_context,
                            server_hostname=origin.host if ssl_context else None)
                        return conn
                    except OSError as exc:
                        error = exc
                self._dns.forget(origin.host, origin.port)   # maybe stale: ask again next time
                raise ConnectError(f"cannot connect: {type(error).__name__}") from error
        except TimeoutError:     # this connect's own deadline: no answer (a replica gone
            # off the network drops the handshake rather than refusing it)
            raise ConnectError(f"cannot connect within {timeout:g} s") from None

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        for host in self._hosts.values():
            for conn in host.idle:
                conn.close()
            host.idle.clear()
