"""The lean client's limits, each on raw sockets: connection cap and wait
queue, head and body size caps, interim 1xx responses, idle expiry, DNS cache."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from backends.http1 import ConnectionPool
from backends.transport import Origin, PoolSaturated, ProtocolError, ResponseTooLarge
from core.config import Timeouts, TransportConfig
from tests.backends.rawserver import QUICK, chunked, fixed, raw_server, synchronous


async def post(pool: ConnectionPool, origin: Origin, timeouts: Timeouts = QUICK) -> tuple[int, bytes]:
    resp = await pool.request(origin, b"POST", "/v1/chat/completions", b"", b"{}", timeouts)
    return resp.status, await resp.read()


def slow(seconds: float) -> Any:
    return lambda raw: [seconds, *fixed(b"ok")]


@synchronous
async def test_a_burst_shares_the_capped_connections() -> None:
    async with raw_server(slow(0.2)) as (origin, counts):
        pool = ConnectionPool(TransportConfig(max_connections=2))
        results = await asyncio.gather(*(post(pool, origin) for _ in range(6)))
        pool.close()
    assert results == [(200, b"ok")] * 6
    assert len(counts) == 2 and sum(counts) == 6       # two connections served all six


@synchronous
async def test_a_full_queue_is_saturated_at_once() -> None:
    async with raw_server(slow(0.5)) as (origin, _):
        pool = ConnectionPool(TransportConfig(max_connections=1, max_queue=1))
        first = asyncio.create_task(post(pool, origin))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(post(pool, origin))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(PoolSaturated):
            await post(pool, origin)
        assert time.monotonic() - started < 0.1
        assert await first == (200, b"ok") and await queued == (200, b"ok")
        pool.close()


@synchronous
async def test_a_wait_past_pool_wait_s_is_saturated_and_leaks_no_slot() -> None:
    async with raw_server(slow(0.6)) as (origin, counts):
        pool = ConnectionPool(TransportConfig(max_connections=1))
        first = asyncio.create_task(post(pool, origin))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(PoolSaturated):
            await post(pool, origin, Timeouts(connect_s=1, pool_wait_s=0.2))
        assert 0.15 < time.monotonic() - started < 0.5
        assert await first == (200, b"ok")
        assert await post(pool, origin) == (200, b"ok")   # the one connection, reused
        pool.close()
    assert counts == [2]


@synchronous
async def test_a_closed_connection_hands_its_slot_to_a_waiter() -> None:
    seen: list[int] = []

    def answer(raw: bytes) -> list[bytes | float] | None:
        seen.append(1)
        return None if len(seen) == 1 else fixed(b"ok")   # the first is cut off unanswered

    async with raw_server(answer) as (origin, counts):
        pool = ConnectionPool(TransportConfig(max_connections=1))
        first = asyncio.create_task(post(pool, origin))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(post(pool, origin))
        with pytest.raises(ConnectionResetError):
            await first
        assert await second == (200, b"ok")
        pool.close()
    assert counts == [1, 1]


@synchronous
async def test_an_oversized_head_is_too_large() -> None:
    big = [b"HTTP/1.1 200 OK\r\nx-junk: " + b"j" * 4096 + b"\r\ncontent-length: 2\r\n\r\nok"]
    endless = [b"HTTP/1.1 200 OK\r\n", *[b"x-more: %d\r\n" % i * 50 for i in range(20)]]
    for answer in (big, endless):
        async with raw_server(lambda raw, a=answer: a) as (origin, _):   # type: ignore[misc]
            pool = ConnectionPool(TransportConfig(max_header_bytes=1024))
            with pytest.raises(ResponseTooLarge):
                await post(pool, origin)
            pool.close()


@synchronous
async def test_an_oversized_body_is_too_large() -> None:
    cap = TransportConfig(max_body_bytes=2048)
    async with raw_server(lambda raw: fixed(b"x" * 4096)) as (origin, _):
        pool = ConnectionPool(cap)
        with pytest.raises(ResponseTooLarge):              # by its content-length, before reading
            await post(pool, origin)
        pool.close()
    async with raw_server(lambda raw: chunked(b"x" * 1500, b"y" * 1500)) as (origin, _):
        pool = ConnectionPool(cap)
        resp = await pool.request(origin, b"POST", "/v1/x", b"", b"{}", QUICK)
        with pytest.raises(ResponseTooLarge):              # chunked: as it arrives
            await resp.read()
        pool.close()


@synchronous
async def test_interim_responses_are_skipped() -> None:
    interim = [b"HTTP/1.1 100 Continue\r\n\r\n",
               b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>\r\n\r\n"]
    async with raw_server(lambda raw: [*interim, *fixed(b'{"final": 1}')]) as (origin, counts):
        pool = ConnectionPool()
        resp = await pool.request(origin, b"POST", "/v1/x", b"", b"{}", QUICK)
        assert resp.status == 200 and "link" not in resp.headers
        assert await resp.read() == b'{"final": 1}'
        assert await post(pool, origin) == (200, b'{"final": 1}')
        pool.close()
    assert counts == [2]                                   # and the connection stays usable


@synchronous
async def test_switching_protocols_is_a_protocol_error() -> None:
    async with raw_server(lambda raw: [b"HTTP/1.1 101 Switching Protocols\r\n\r\n"]) as (origin, _):
        pool = ConnectionPool()
        with pytest.raises(ProtocolError):
            await post(pool, origin)
        pool.close()


@synchronous
async def test_idle_connections_expire_after_idle_s() -> None:
    async with raw_server(lambda raw: fixed(b"ok")) as (origin, counts):
        pool = ConnectionPool(TransportConfig(idle_s=0.3))
        await post(pool, origin)
        await asyncio.sleep(0.1)
        await post(pool, origin)                           # fresh enough: reused
        await asyncio.sleep(0.5)
        await post(pool, origin)                           # expired: a new connection
        pool.close()
    assert counts == [2, 1]


async def lookups_for(dns_ttl_s: float) -> list[str]:
    """Three requests, each on a new connection, to ``localhost``: the names looked up."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    names: list[str] = []

    async def counting(host: Any, *args: Any, **kw: Any) -> Any:
        names.append(host)
        return await real(host, *args, **kw)

    async with raw_server(lambda raw: fixed(b"ok"), close_after=1) as (origin, counts):
        by_name = Origin.parse(f"http://localhost:{origin.port}/v1")
        pool = ConnectionPool(TransportConfig(dns_ttl_s=dns_ttl_s))
        loop.getaddrinfo = counting                        # type: ignore[method-assign]
        try:
            for _ in range(3):
                assert await post(pool, by_name) == (200, b"ok")
                await asyncio.sleep(0.1)                   # the server closed it: reconnect
        finally:
            loop.getaddrinfo = real                        # type: ignore[method-assign]
            pool.close()
    assert counts == [1, 1, 1]
    return [n for n in names if n == "localhost"]


@synchronous
async def test_dns_answers_are_cached_for_dns_ttl_s() -> None:
    assert len(await lookups_for(60)) == 1
    assert len(await lookups_for(0)) == 3
