"""The aiohttp ``Transport``: for what the lean client does not do.

    transport = AiohttpTransport(TransportConfig(kind="aiohttp"))
    resp = await transport.request(origin, b"POST", "/v1/chat/completions", headers, body, timeouts)
    body = await resp.read()
    await transport.aclose()

``trust_env=True`` makes aiohttp follow ``HTTP_PROXY`` / ``HTTPS_PROXY`` /
``NO_PROXY`` (and ``~/.netrc`` for proxy credentials), which is how an
upstream behind a corporate proxy is reached. The connector caps
connections per host at ``max_connections``, caches DNS for ``dns_ttl_s``
and keeps idle connections for ``idle_s``. Response heads are capped per
line at ``max_header_bytes`` and bodies at ``max_body_bytes``.

Differences from the lean client: there is no bounded wait queue (aiohttp
queues without limit), and a pool wait that runs out is reported as a
connect timeout, because aiohttp's ``connect`` timeout covers both.
aiohttp's own exceptions never leave this module: they become the
``backends.transport`` errors, ``OSError`` or ``TimeoutError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import yarl

from backends.transport import ConnectError, Origin, ProtocolError, ResponseTooLarge
from core.config import Timeouts, TransportConfig


@contextmanager
def _translated() -> Iterator[None]:
    """aiohttp's exceptions as the transport's own."""
    try:
        yield
    except aiohttp.ClientConnectorError as exc:      # refused, unresolvable, TLS, proxy
        raise ConnectError(f"cannot connect: {type(exc).__name__}") from exc
    except (aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise TimeoutError(str(exc) or "upstream timed out") from exc
    except aiohttp.ClientResponseError as exc:       # the head could not be parsed
        if "too long" in str(exc).lower() or "got more than" in str(exc).lower():
            raise ResponseTooLarge(f"response head too large: {exc.message}") from exc
        raise ProtocolError(f"invalid HTTP response: {exc.message}") from exc
    except aiohttp.ClientError as exc:               # disconnects, broken payloads
        raise ProtocolError(f"{type(exc).__name__}: {exc}") from exc


class AiohttpResponse:
    """A ``backends.transport.Response`` over aiohttp's ``ClientResponse``."""

    __slots__ = ("status", "headers", "_resp", "_received", "_max_body")

    def __init__(self, resp: aiohttp.ClientResponse, max_body: int) -> None:
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.headers.items()}
        self._resp = resp
        self._received = 0
        self._max_body = max_body

    @property
    def done(self) -> bool:
        return self._resp.content.at_eof()

    async def readany(self) -> bytes:
        with _translated():
            data = await self._resp.content.readany()
        self._received += len(data)
        if self._received > self._max_body:
            self.close()
            raise ResponseTooLarge(f"response body over {self._max_body} bytes")
        return data

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        self.release()
        return b"".join(parts)

    def release(self) -> None:
        # aiohttp pools the connection when the body was read to its end, and
        # closes it otherwise (which stops the upstream's generation).
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()

    def close(self) -> None:
        self._resp.close()


def header_pairs(headers: bytes) -> list[tuple[str, str]]:
    """``b"name: value\\r\\n"`` lines as (name, value) pairs."""
    pairs = []
    for line in headers.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if sep:
            pairs.append((name.strip().decode("latin-1"), value.strip().decode("latin-1")))
    return pairs


class AiohttpTransport:
    def __init__(self, config: TransportConfig | None = None) -> None:
        self.config = config or TransportConfig()
        self._session: aiohttp.ClientSession | None = None   # made in the running loop

    def _open(self) -> aiohttp.ClientSession:
        c = self.config
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=c.max_connections, keepalive_timeout=c.idle_s,
            use_dns_cache=c.dns_ttl_s > 0, ttl_dns_cache=max(1, int(c.dns_ttl_s)))
        self._session = aiohttp.ClientSession(
            connector=connector, trust_env=True, max_line_size=c.max_header_bytes,
            max_field_size=c.max_header_bytes, timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def request(self, origin: Origin, method: bytes, path: str, headers: bytes,
                      body: bytes, timeouts: Timeouts) -> AiohttpResponse:
        session = self._session or self._open()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect_s,
                                        connect=timeouts.connect_s + timeouts.pool_wait_s)
        with _translated():
            # encoded=True: the path goes out as the backend wrote it, as the lean client
            # sends it; yarl would otherwise decode %3A to ":" in a Bedrock model id,
            # and the request would no longer match its SigV4 signature.
            resp = await session.request(method.decode("ascii"),
                                         yarl.URL(origin.url(path), encoded=True),
                                         headers=header_pairs(headers), data=body,
                                         timeout=timeout, allow_redirects=False)
        length = resp.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.config.max_body_bytes:
            resp.close()
            raise ResponseTooLarge(f"response body over {self.config.max_body_bytes} bytes")
        return AiohttpResponse(resp, self.config.max_body_bytes)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
