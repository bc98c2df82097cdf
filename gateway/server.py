"""How routegate runs under uvicorn: the HTTP protocol with limits on each request.

    uvicorn.run("gateway.app:create_app_from_env", factory=True,
                **uvicorn_options(RequestLimits(max_header_bytes=32768, header_timeout_s=10.0,
                                                body_timeout_s=30.0)))

uvicorn's httptools protocol accepts a request head of any size and waits for
it, and for a body, forever: one 64 MB header, one byte a second, or a body
that never comes, holds the event loop or a connection. ``LimitedProtocol``
adds three limits inside the protocol, where they cost one comparison per read:

- the request line and headers together may be at most ``max_header_bytes``.
  The parser is never fed a byte past the cap; the client gets 431 with
  OpenAI's error shape, and the connection is closed;
- a request head has ``header_timeout_s`` to arrive, counted from the
  connection's start or from the first byte of a later keep-alive request. An
  idle keep-alive connection is closed by uvicorn's own ``timeout_keep_alive``;
- the whole request, head and body, has ``body_timeout_s`` to arrive, counted
  from the same moment (``body_timeouts`` sets other deadlines by path: shorter
  for the login form, longer for uploads). Past it the client gets 408
  (``RequestTimeout``, ``connection: close``) if no answer has started, and
  the connection is closed; the app's next ``receive`` sees a disconnect with
  ``BODY_TIMED_OUT`` set in its scope, so it reports 408 rather than a client
  that left (``gateway/asgi.py``).

Both deadlines are checked by one timer per connection every quarter of the
shorter of ``header_timeout_s`` and ``body_timeout_s``, not armed and
cancelled per request (a timer per request filled the event loop's heap with
cancelled handles and cost a tenth of the throughput): nothing is armed for a
request, and a slow head or body is cut at most a quarter of that period late
(per-path deadlines share the same period). The body deadline lives here and
not in the app because only the protocol sees a body that never starts: an
app waiting in its first ``receive`` cannot tell a slow client from a quick one
without a timer of its own.

Not covered: bytes of a pipelined request that share a read with the end of
the one before (at most one read, 256 KiB, goes uncounted). A pipelined
request is not cut while it waits for the one before it (uvicorn pauses its
body meanwhile), but that wait counts against its deadline.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
from dataclasses import dataclass, field
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from core.errors import GatewayError, InvalidRequest, RequestTimeout

log = logging.getLogger("routegate.server")
DEFAULT_MAX_HEADER_BYTES = 32 * 1024
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_UPLOAD_TIMEOUT_S = 300.0     # POST /v1/files: up to batch.max_file_bytes
LOGIN_TIMEOUT_S = 5.0                # POST /ui/login: one form field
# Set in the request's scope when its body was cut for being slow.
BODY_TIMED_OUT = "routegate.body_timed_out"
KEEP_ALIVE_S = 5
# After a 431 or 408, how long the client may go on sending before the socket
# is closed. Closing with unread input makes the kernel send a reset, which can
# destroy the answer before the client reads it; reading stays paused meanwhile.
LINGER_S = 1.0


@dataclass(frozen=True)
class RequestLimits:
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    body_timeouts: dict[str, float] = field(default_factory=dict)   # by exact path

    @classmethod
    def for_routes(cls, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                   header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
                   body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
                   upload_timeout_s: float = DEFAULT_UPLOAD_TIMEOUT_S) -> RequestLimits:
        """routegate's deadlines: the login form's shorter, an upload's longer."""
        return cls(max_header_bytes, header_timeout_s, body_timeout_s, {
            "/ui/login": min(LOGIN_TIMEOUT_S, body_timeout_s),
            "/v1/files": max(upload_timeout_s, body_timeout_s)})

    @property
    def check_every_s(self) -> float:
        return min(self.header_timeout_s, self.body_timeout_s) / 4


def error_response(status: int, error: GatewayError) -> bytes:
    """A whole answer written by the protocol itself: status line, headers, OpenAI-style body."""
    body = error.to_json()
    return b"".join([
        STATUS_LINE[status],
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n\r\n",
        body,
    ])


def header_too_large_response(max_bytes: int) -> bytes:
    return error_response(431, InvalidRequest(
        f"Request line and headers exceed {max_bytes} bytes.",
        code="request_header_fields_too_large"))


def body_timeout_response(timeout_s: float) -> bytes:
    return error_response(408, RequestTimeout(
        f"The request body did not arrive within {timeout_s:g} s."))


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size cap on request heads and deadlines
    on heads and bodies."""

    def __init__(self, *args: Any, limits: RequestLimits = RequestLimits(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.in_head = True          # the bytes being read belong to a request head
        self.head_bytes = 0          # bytes of the current head fed to the parser
        # When the current request's first byte came; None between requests.
        self.head_started: float | None = None
        self.body_timeout_s = limits.body_timeout_s    # the current request's
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
        room = self.limits.max_header_bytes - self.head_bytes
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
        if self.head_started is None:   # a pipelined head that shared a read with the last body
            self.head_started = self.loop.time()
        super().on_headers_complete()
        # One dict look-up per request: the body's deadline by path, counted from head_started.
        self.body_timeout_s = self.limits.body_timeouts.get(
            self.scope.get("path", ""), self.limits.body_timeout_s)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # What follows is the next request's head; its timer starts at its first byte.
        self.in_head = True
        self.head_bytes = 0
        self.head_started = None

    def _reject_head(self) -> None:
        self._cancel_head_timer()
        self.logger.warning("Request head over %d bytes: 431, closing.",
                            self.limits.max_header_bytes)
        self.transport.pause_reading()   # nothing past the cap is read, let alone parsed
        if not self._close_after_response():
            self._answer_and_close(header_too_large_response(self.limits.max_header_bytes))

    def _answer_and_close(self, answer: bytes) -> None:
        # Closing with unread input makes the kernel send a reset, which can
        # destroy the answer before the client reads it: half-close, linger, close.
        self.transport.pause_reading()
        self.transport.write(answer)
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
        self.head_timer = self.loop.call_later(self.limits.check_every_s, self._check_deadlines)

    def _cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _check_deadlines(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        started = self.head_started
        waited = 0.0 if started is None else self.loop.time() - started
        if self.in_head and waited >= self.limits.header_timeout_s:
            self.logger.info("Request head not received in %.1f s: closing.",
                             self.limits.header_timeout_s)
            self.transport.pause_reading()
            if not self._close_after_response():
                self.transport.close()
        elif not self.in_head and waited >= self.body_timeout_s and not self.pipeline:
            # (A pipelined request waits for the one before it: uvicorn paused its body.)
            self._cut_slow_body()
        else:
            self._schedule_check()

    def _cut_slow_body(self) -> None:
        self.logger.info("Request body not received in %.1f s: 408, closing.", self.body_timeout_s)
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()       # answered already: only the body's rest was left
        elif cycle.response_started:
            cycle.keep_alive = False     # an answer is going out: close once it is done
        else:
            cycle.scope[BODY_TIMED_OUT] = True  # type: ignore[literal-required]
            self._answer_and_close(body_timeout_response(self.body_timeout_s))


def uvicorn_options(limits: RequestLimits) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` that install the limited protocol.

    A ``functools.partial`` of a module-level class pickles, so the limits
    reach every worker process that ``--workers N`` spawns.
    """
    protocol = functools.partial(LimitedProtocol, limits=limits)
    return {
        "http": cast("type[asyncio.Protocol]", protocol),
        "timeout_keep_alive": KEEP_ALIVE_S,
    }


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; return the soft limit.

    Each connection holds a descriptor, and the usual default soft limit of
    1,024 is what let 1,100 idle connections take every other client down.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:   # e.g. a hard limit the kernel caps lower
            log.warning("open files: cannot raise the soft limit %d to %d (%s)", soft, target, exc)
            return soft
    log.info("open files: soft limit %d (was %d), hard limit %s", max(soft, target), soft,
             "unlimited" if hard == resource.RLIM_INFINITY else hard)
    return max(soft, target)
