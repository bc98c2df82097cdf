"""How a backend sends HTTP upstream: one interface, two implementations.

    transport = make_transport(model_config)   # backends/transports.py: by model.transport.kind
    resp = await transport.request(origin, b"POST", origin.path + "/chat/completions",
                                   b"content-type: application/json\\r\\n", body, model.timeouts)
    resp.status, resp.headers                          # returns once the response head is in
    chunk = await resp.readany()                       # body as it arrives, b"" at the end
    body = await resp.read()                           # or all of it (then released)
    resp.release()  /  resp.close()                    # done (reuse if complete) / abandon
    await transport.aclose()

Like httpx's ``handle_async_request``, the interface is one call. The two
implementations:

- ``backends.http1.ConnectionPool``, the lean httptools client: plain HTTP
  (and direct TLS) with connection caps, size caps and cached DNS. It is the
  reason a routegate hop costs about what a bare aiohttp proxy costs.
- ``backends.aiohttp_transport.AiohttpTransport``: aiohttp with
  ``trust_env``, for HTTPS through a proxy and anything else the lean one
  does not do.

This module holds the interface and its error types, which both implement;
``backends/transports.py`` picks one.

Timeouts: a transport applies ``timeouts.connect_s`` (DNS, TCP, TLS) and
``timeouts.pool_wait_s`` (waiting for a free connection under the cap). The
caller bounds the wait for the answer itself (``first_byte_s`` for streams,
``total_s`` for whole answers) with its own deadline, so no timer is set twice.

Failures raise ``TransportError`` subclasses (all ``ConnectionError``s),
``OSError`` or ``TimeoutError``; the backend converts them at its edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from core.config import Timeouts


class TransportError(ConnectionError):
    """A network or protocol failure of one upstream exchange."""


class ConnectError(TransportError):
    """No connection could be opened (refused, unresolvable, unreachable, bad TLS)."""


class ProtocolError(TransportError):
    """The upstream sent something that is not HTTP/1.1, or broke off its framing."""


class PoolSaturated(TransportError):
    """Every connection to the upstream is busy and the wait queue is full, or
    no connection became free within ``timeouts.pool_wait_s``."""


class ResponseTooLarge(TransportError):
    """The response's head or body passed ``max_header_bytes`` / ``max_body_bytes``."""


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

    def url(self, path: str) -> str:
        """An absolute URL for ``path`` (which already includes the base path)."""
        return f"{self.scheme}://{self.host_header.decode('ascii')}{path}"


class Response(Protocol):
    """One upstream response; the body is read as it arrives."""

    status: int
    headers: dict[str, str]      # lower-case names; a repeated header keeps its last value

    @property
    def done(self) -> bool:
        """The whole body has arrived."""
        ...

    async def readany(self) -> bytes:
        """The body bytes that arrived since the last call; b"" once it is complete."""
        ...

    async def read(self) -> bytes:
        """The rest of the body; then the response is released."""
        ...

    def release(self) -> None:
        """Done: a complete response frees its connection for reuse, an
        incomplete one closes it (which is how an upstream learns to stop)."""
        ...

    def close(self) -> None:
        """Abandon the response and its connection."""
        ...


class Transport(Protocol):
    async def request(self, origin: Origin, method: bytes, path: str, headers: bytes,
                      body: bytes, timeouts: Timeouts) -> Response:
        """Send one request; return once the response head is in.

        ``headers`` are complete header lines (``b"name: value\\r\\n"`` each);
        host and content-length are added by the transport."""
        ...

    async def aclose(self) -> None: ...
