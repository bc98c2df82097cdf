"""How routegate runs under uvicorn: the HTTP protocol with request-head limits.

    uvicorn.run("gateway.app:create_app_from_env", factory=True,
                **uvicorn_options(HeaderLimits(max_bytes=32768, timeout_s=10.0)))

uvicorn's httptools protocol accepts a request head of any size and waits for
it forever: one 64 MB header, or one byte a second, holds the event loop or a
connection. ``HeaderLimitedProtocol`` adds the two limits inside the protocol,
where they cost one comparison per read:

- the request line and headers together may be at most ``max_bytes``. The
  parser is never fed a byte past the cap; the client gets 431 with OpenAI's
  error shape, and the connection is closed;
- a request head has ``timeout_s`` to arrive, counted from the connection's
  start or from the first byte of a later keep-alive request. An idle
  keep-alive connection is closed by uvicorn's own ``timeout_keep_alive``.
  The deadline is checked by one timer per connection every quarter of
  ``timeout_s``, not armed and cancelled per request (a timer per request
  filled the event loop's heap with cancelled handles and cost a tenth of
  the throughput), so a slow head is cut between 1 and 1.25 × ``timeout_s``.

Not covered: a slow request *body* (the app reads it with its own size cap),
and bytes of a pipelined request that share a read with the end of the one
before (at most one read, 256 KiB, goes uncounted).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from core.errors import InvalidRequest

DEFAULT_MAX_HEADER_BYTES = 32 * 1024
DEFAULT_HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
# After a 431, how long the client may go on sending before the socket is
# closed. Closing with unread input makes the kernel send a reset, which can
# destroy the 431 before the client reads it; reading stays paused meanwhile.
LINGER_S = 1.0


@dataclass(frozen=True)
class HeaderLimits:
    max_bytes: int = DEFAULT_MAX_HEADER_BYTES
    timeout_s: float = DEFAULT_HEADER_TIMEOUT_S


def header_too_large_response(max_bytes: int) -> bytes:
    """The whole 431 answer: status line, headers and an OpenAI-style body."""
    body = InvalidRequest(f"Request line and headers exceed {max_bytes} bytes.",
                          code="request_header_fields_too_large").to_json()
    return b"".join([
        STATUS_LINE[431],
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n\r\n",
        body,
    ])


class HeaderLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size cap and a deadline on request heads."""

    def __init__(self, *args: Any, limits: HeaderLimits = HeaderLimits(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.in_head = True          # the bytes being read belong to a request head
        self.head_bytes = 0          # bytes of the current head fed to the parser
        self.head_started: float | None = None   # when the current head's first byte came
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_started = self.loop.time()
        self._schedule_check()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.in_head:
            super().data_received(data)
            return
        if self.head_started is None:   # first byte of a later keep-alive request
            self.head_started = self.loop.time()
        room = self.limits.max_bytes - self.head_bytes
        if len(data) <= room:
            self.head_bytes += len(data)
            super().data_received(data)
            return
        # Feed only what fits: the head may end inside it, with a body after.
        self.head_bytes += room
        super().data_received(data[:room])
        if self.transport.is_closing():
            return
        if self.in_head:
            self._reject_head()
        else:
            self.data_received(data[room:])

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_started = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # What follows is the next request's head; its timer starts at its first byte.
        self.in_head = True
        self.head_bytes = 0

    def _reject_head(self) -> None:
        self._cancel_head_timer()
        self.logger.warning("Request head over %d bytes: 431, closing.", self.limits.max_bytes)
        self.transport.pause_reading()   # nothing past the cap is read, let alone parsed
        if self._close_after_response():
            return
        self.transport.write(header_too_large_response(self.limits.max_bytes))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _close_after_response(self) -> bool:
        """With a pipelined response still going out, end the connection after it
        instead of writing into the middle of it or cutting it short."""
        if self.cycle is None or self.cycle.response_complete:
            return False
        self.cycle.keep_alive = False
        return True

    def _schedule_check(self) -> None:
        self.head_timer = self.loop.call_later(self.limits.timeout_s / 4, self._check_head)

    def _cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _check_head(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        started = self.head_started
        if not (self.in_head and started is not None
                and self.loop.time() - started >= self.limits.timeout_s):
            self._schedule_check()
            return
        self.logger.info("Request head not received in %.1f s: closing.", self.limits.timeout_s)
        self.transport.pause_reading()
        if not self._close_after_response():
            self.transport.close()


def uvicorn_options(limits: HeaderLimits) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` that install the limited protocol.

    A ``functools.partial`` of a module-level class pickles, so the limits
    reach every worker process that ``--workers N`` spawns.
    """
    protocol = functools.partial(HeaderLimitedProtocol, limits=limits)
    return {
        "http": cast("type[asyncio.Protocol]", protocol),
        "timeout_keep_alive": KEEP_ALIVE_S,
    }
