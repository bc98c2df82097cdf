"""A lean pipelined Redis client for the two scripts on the request path.

    client = PipelinedRedis("redis://127.0.0.1:6379/0")
    reserve = client.register_script(lua_text)          # same shape as redis-py's
    reply = await reserve(keys=[...], args=[...])

Why not redis-py here: its asyncio client spends ~150 µs of Python per
command (pool checkout, retry wrapper, packing), which at two calls per
request was a third of the gateway's CPU. This client keeps one connection,
pipelines every call on it (Redis answers in order, so replies pair with a
FIFO of futures), coalesces the writes of one loop tick into one send, and
packs and parses with hiredis. Everything else (usage reports, admin,
cluster) stays on redis-py.

Failures surface as redis-py's exception types, so the store's fail policy
treats both clients alike: a dropped connection fails the calls in flight
with ``ConnectionError`` and the next call reconnects. Every call is bounded
by ``call_timeout_s`` with one timer per connection rather than one per call:
a call left unanswered that long fails every call behind it on the same
connection (their replies queue behind its own) with ``TimeoutError`` and
drops the connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from typing import Any

import hiredis
from redis._parsers.base import BaseParser  # redis-py's table of error prefixes
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

CONNECT_TIMEOUT_S = 1.0
CALL_TIMEOUT_S = 2.0


def encode_command(args: tuple[Any, ...] | list[Any]) -> bytes:
    """RESP for one command: str, bytes, int and float arguments (hiredis, in C)."""
    return hiredis.pack_command(tuple(args))


class _RespProtocol(asyncio.Protocol):
    def __init__(self, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.reader = hiredis.Reader()
        # (future, deadline): Redis answers in order, so the oldest is first.
        self.pending: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer: list[bytes] = []
        self._timeout_s = call_timeout_s
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.closed:          # timed out: every call on this connection already failed
            return
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            future = self.pending.popleft()[0]
            if not future.done():  # a caller that was cancelled has gone
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail_all(RedisConnectionError(f"Redis connection lost: {exc or 'closed by server'}"))

    def _fail_all(self, error: Exception) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self.pending:
            future = self.pending.popleft()[0]
            if not future.done():
                future.set_exception(error)

    def send(self, payload: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((future, loop.time() + self._timeout_s))
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout_s, self._check)
        if not self._buffer:
            loop.call_soon(self._flush)
        self._buffer.append(payload)
        return future

    def _check(self) -> None:
        """The watchdog: re-armed for the oldest call in flight, or it times out."""
        self._watchdog = None
        if not self.pending:
            return
        loop = asyncio.get_running_loop()
        deadline = self.pending[0][1]
        if deadline > loop.time():
            self._watchdog = loop.call_at(deadline, self._check)
            return
        self.closed = True
        self._fail_all(RedisTimeoutError(f"Redis did not answer within {self._timeout_s} s"))
        if self.transport is not None:
            self.transport.abort()

    def _flush(self) -> None:
        data, self._buffer = b"".join(self._buffer), []
        if self.transport is not None and not self.closed:
            self.transport.write(data)


class PipelinedRedis:
    def __init__(self, url: str, *, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._options = parse_url(url)
        self.call_timeout_s = call_timeout_s   # callers need no timer of their own
        self._protocol: _RespProtocol | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> _RespProtocol:
        loop = asyncio.get_running_loop()
        opts = self._options
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            if "path" in opts:
                _, protocol = await loop.create_unix_connection(
                    lambda: _RespProtocol(self.call_timeout_s), opts["path"])
            else:
                tls = ssl.create_default_context() if "ssl" in str(
                    opts.get("connection_class", "")).lower() else None
                _, protocol = await loop.create_connection(
                    lambda: _RespProtocol(self.call_timeout_s), opts.get("host", "localhost"),
                    opts.get("port", 6379), ssl=tls)
            setup = []
            if opts.get("password"):
                setup.append(("AUTH", *filter(None, (opts.get("username"), opts["password"]))))
            if opts.get("db"):
                setup.append(("SELECT", opts["db"]))
            for command in setup:
                _check(await protocol.send(encode_command(command)))
        return protocol

    async def _connection(self) -> _RespProtocol:
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol
        async with self._lock:
            if self._protocol is None or self._protocol.closed:
                try:
                    self._protocol = await self._connect()
                except OSError as exc:
                    raise RedisConnectionError(f"cannot connect to Redis: {exc}") from None
            return self._protocol

    async def execute(self, *args: Any) -> Any:
        protocol = self._protocol
        if protocol is None or protocol.closed:   # else no coroutine call: the common case
            protocol = await self._connection()
        return _check(await protocol.send(encode_command(args)))

    def register_script(self, text: str) -> PipelinedScript:
        return PipelinedScript(self, text)

    async def aclose(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


def _check(reply: Any) -> Any:
    """The reply, or the error redis-py would raise for it, by its prefix: a
    restarted Redis still loading its data answers ``-LOADING`` (BusyLoadingError,
    a ConnectionError: an outage), ``-READONLY`` is a failover, ``-NOSCRIPT`` a
    forgotten script."""
    if isinstance(reply, hiredis.ReplyError):
        raise BaseParser.parse_error(str(reply))
    return reply


class PipelinedScript:
    """EVALSHA, loading the script once more if Redis forgot it (restart, failover)."""

    def __init__(self, client: PipelinedRedis, text: str) -> None:
        self._client = client
        self._text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    async def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        client = self._client
        try:
            protocol = client._protocol
            if protocol is not None and not protocol.closed:   # one coroutine level less
                command = encode_command(("EVALSHA", self.sha, len(keys), *keys, *args))
                return _check(await protocol.send(command))
            return await client.execute("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self._client.execute("SCRIPT", "LOAD", self._text)
            return await self._client.execute("EVALSHA", self.sha, len(keys), *keys, *args)
