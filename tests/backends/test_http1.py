"""backends.http1 against real sockets: a raw asyncio server that answers
exactly the bytes each test wants, so framing and connection reuse are
checked on the wire, not assumed."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
import trustme

from backends.http1 import ConnectionPool
from backends.transport import ConnectError, Origin, ProtocolError
from tests.backends.rawserver import QUICK, chunked, fixed, raw_server, synchronous


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

    def answer(raw: bytes) -> list[bytes | float]:
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
