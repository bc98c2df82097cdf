"""A raw asyncio upstream for transport and backend tests: it answers exactly
the bytes each test wants, so framing, limits and connection reuse are
checked on the wire, not assumed.

    async with raw_server(lambda raw: fixed(b'{"ok": true}')) as (origin, counts):
        ...   # counts: requests served per connection, in the order they opened

An answer is a list of writes; a float in it is a pause of that many seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from backends.transport import Origin
from core.config import Timeouts

QUICK = Timeouts(connect_s=2, pool_wait_s=1)

Answer = Callable[[bytes], list[bytes | float] | None]   # request -> writes (None: close)


def synchronous(fn: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop (the project uses no async pytest plugin)."""
    def run() -> None:
        asyncio.run(fn())
    run.__name__ = fn.__name__
    return run


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def _write(writer: asyncio.StreamWriter, parts: list[bytes | float]) -> None:
    for part in parts:
        if isinstance(part, float):
            await asyncio.sleep(part)
            continue
        writer.write(part)
        await writer.drain()
        await asyncio.sleep(0.05)


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
                raw = await _read_request(reader)
                counts[me] += 1
                parts = answer(raw)
                if parts is None:
                    break
                await _write(writer, parts)
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


def fixed(body: bytes, status: int = 200, headers: bytes = b"") -> list[bytes | float]:
    return [b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
            % (status, len(body), headers, body)]


def chunked(*chunks: bytes | float) -> list[bytes | float]:
    """A chunked response, one chunk per write; a float is a pause."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    body = [c if isinstance(c, float) else b"%x\r\n%s\r\n" % (len(c), c) for c in chunks]
    return [head, *body, b"0\r\n\r\n"]
