"""backends.http1 against real sockets: a raw asyncio server that answers
exactly the bytes each test wants, so framing and connection reuse are
checked on the wire, not assumed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
import trustme

from backends.http1 import ConnectionPool
from backends.transport import ConnectError, Origin, ProtocolError
from core.config import Timeouts


def synchronous(fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop (the project uses no async pytest plugin)."""
    def run() -> None:
        asyncio.run(fn())
    run.__name__ = fn.__name__
    return run


QUICK = Timeouts(connect_s=2, pool_wait_s=1)

Answer = Callable[[bytes], list[bytes] | None]   # request head+body -> raw writes (None: close)


@contextlib.asynccontextmanager
async def raw_server(answer: Answer, close_after: int | None = None,
                     tls: ssl.SSLContext | None = None
                     ) -> AsyncIterator[tuple[Origin, list[int]]]:
    """Serve ``answer`` on loopback; yields the origin and the per-connection request counts."""
    counts: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts.append(0)
        me = len(counts) - 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                counts[me] += 1
                parts = answer(head + body)
                if parts is None:
                    break
                for part in parts:
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.05)
                if close_after is not None and counts[me] >= close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    base = f"https://localhost:{port}" if tls else f"http://127.0.0.1:{port}"  # the cert's name
    try:
        yield Origin.parse(base + "/v1"), counts
    finally:
        server.close()


def fixed(body: bytes, status: int = 200) -> list[bytes]:
    return [b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(body), body)]


def chunked(*chunks: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return [head, *(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks), b"0\r\n\r\n"]


async def post(pool: ConnectionPool, origin: Origin, body: bytes = b"{}") -> tuple[int, bytes]:
    resp = await pool.request(origin, b"POST", origin.path + "/chat/completions",
                              b"content-type: application/json\r\n", body, QUICK)
    return resp.status, await resp.read()


def test_origin_parsing() -> None:
    o = Origin.parse("https://api.example.com/v1/")
    assert (o.scheme, o.host, o.port, o.path, o.host_header) == (
        "https", "api.example.com", 443, "/v1", b"api.example.com")
    assert Origin.parse("http://127.0.0.1:8000").host_header == b"127.0.0.1:8000"
    with pytest.raises(ValueError):
        Origin.parse("ftp://x/")


@synchronous
async def test_keep_alive_reuses_one_connection_and_sends_the_body() -> None:
    seen: list[bytes] = []

    def answer(raw: bytes) -> list[bytes]:
        seen.append(raw)
        return fixed(b'{"n": %d}' % len(seen))

    async with raw_server(answer) as (origin, counts):
        pool = ConnectionPool()
        results = [await post(pool, origin, b'{"i": %d}' % i) for i in range(5)]
        pool.close()
    assert results == [(200, b'{"n": %d}' % (i + 1)) for i in range(5)]
    assert counts == [5]                                   # one connection served all five
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\ncontent-length: 8\r\n" in seen[0] and seen[0].endswith(b'{"i": 0}')
    assert b"\r\nhost: 127.0.0.1:" in seen[0]


@synchronous
async def test_chunked_body_arrives_piece_by_piece() -> None:
    async with raw_server(lambda raw: chunked(b"data: 1\n\n", b"data: 2\n\n")) as (origin, _):
        pool = ConnectionPool()
        resp = await pool.request(origin, b"POST", "/x", b"", b"{}")
        pieces = []
        while piece := await resp.readany():
            pieces.append(piece)
        resp.release()
        assert b"".join(pieces) == b"data: 1\n\ndata: 2\n\n"
        assert len(pieces) == 2                            # not buffered until the end
        assert resp.headers["content-type"] == "text/event-stream"
        assert await post(pool, origin) == (200, b"data: 1\n\ndata: 2\n\n")
        pool.close()


@synchronous
async def test_a_connection_the_upstream_closed_while_idle_is_retried_once() -> None:
    async with raw_server(lambda raw: fixed(b"ok"), close_after=1) as (origin, counts):
        pool = ConnectionPool()
        assert await post(pool, origin) == (200, b"ok")
        await asyncio.sleep(0.1)                           # the server has closed it by now
        assert await post(pool, origin) == (200, b"ok")
        pool.close()
    assert counts == [1, 1]


@synchronous
async def test_abandoned_response_drops_its_connection() -> None:
    async with raw_server(lambda raw: chunked(b"a" * 10, b"b" * 10)) as (origin, counts):
        pool = ConnectionPool()
        resp = await pool.request(origin, b"POST", "/x", b"", b"{}")
        assert await resp.readany() == b"a" * 10
        resp.close()                                       # mid-body: not reusable
        assert await post(pool, origin) == (200, b"a" * 10 + b"b" * 10)
        pool.close()
    assert counts == [1, 1]


@synchronous
async def test_body_delimited_by_close() -> None:
    async with raw_server(lambda raw: [b"HTTP/1.0 200 OK\r\n\r\nuntil the end"],
                          close_after=1) as (origin, _):
        pool = ConnectionPool()
        assert await post(pool, origin) == (200, b"until the end")
        pool.close()


@synchronous
async def test_cut_mid_body_raises() -> None:
    async with raw_server(lambda raw: [b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort"],
                          close_after=1) as (origin, _):
        pool = ConnectionPool()
        with pytest.raises(ConnectionResetError):
            await post(pool, origin)
        pool.close()


@synchronous
async def test_garbage_is_a_protocol_error() -> None:
    async with raw_server(lambda raw: [b"SSH-2.0-OpenSSH\r\n\r\n"]) as (origin, _):
        pool = ConnectionPool()
        with pytest.raises(ProtocolError):
            await post(pool, origin)
        pool.close()


@synchronous
async def test_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]        # bound, never listening: connections are refused
        pool = ConnectionPool()
        with pytest.raises(ConnectError):
            await post(pool, Origin.parse(f"http://127.0.0.1:{port}"))


@synchronous
async def test_large_body_is_flow_controlled_and_complete() -> None:
    big = bytes(range(256)) * 16384                        # 4 MiB, above the high-water mark
    async with raw_server(lambda raw: fixed(big)) as (origin, _):
        pool = ConnectionPool()
        resp = await pool.request(origin, b"POST", "/x", b"", b"{}")
        await asyncio.sleep(0.2)                           # let the reader fill and pause
        assert await resp.read() == big
        pool.close()


@synchronous
async def test_tls_upstream_with_keep_alive() -> None:
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    async with raw_server(lambda raw: fixed(b'{"tls": true}'), tls=server_tls) as (origin, counts):
        assert origin.scheme == "https"
        pool = ConnectionPool(ssl_context=client_tls)
        assert [await post(pool, origin) for _ in range(3)] == [(200, b'{"tls": true}')] * 3
        pool.close()
        with pytest.raises(ConnectionError):       # an untrusted certificate is refused
            await post(ConnectionPool(), origin)
    assert counts[0] == 3
