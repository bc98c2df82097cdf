"""An upstream SSE stream, and what is measured on it: TTFT, inter-token
latency and the upstream's usage.

A stream is complete only when ``data: [DONE]`` arrived. One that ends
without it (the upstream closed the connection, or ended the body cleanly but
early) raises ``UpstreamError`` with code ``upstream_stream_truncated`` from
the iterator, so the relay ends the client's stream with an error event and
bills what was relayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from backends.base import LiveStats, Usage
from backends.model_name import BodyModel
from backends.sse import EventSplitter, SSEEvent
from backends.transport import Response
from core.errors import GatewayError, UpstreamError
from core.types import LiveStats as _Stats


class StreamOwner(Protocol):
    """What a stream needs of the backend that opened it (``OpenAICompatBackend``)."""

    name: str
    stats: _Stats
    between_s: float           # the most silence between two reads
    affinity: Any              # releases the replica the stream held
    body_model: BodyModel      # names the configured model in each chunk

    def convert(self, exc: BaseException, *, generating: bool = False,
                mid_stream: bool = False) -> GatewayError | None: ...


class Primed(Protocol):
    async def prime(self) -> None: ...


class Opener(Protocol):
    """What ``open_stream`` needs of a backend: its stats and its error conversion."""

    @property
    def stats(self) -> _Stats: ...

    def convert(self, exc: BaseException, *, generating: bool = False,
                mid_stream: bool = False) -> GatewayError | None: ...


S = TypeVar("S", bound=Primed)


async def open_stream(owner: Opener, send: Callable[[], Awaitable[Response]],
                      make: Callable[[Response], S], first_byte_s: float,
                      release: Callable[[], None] = lambda: None
                      ) -> tuple[S | None, Response | None, bytes]:
    """Every backend's stream opening: the request sent and its first event read within
    ``first_byte_s`` (so the gateway can still fall back), counted in flight meanwhile.
    (the primed stream, None, b"") when the upstream took it; (None, the response, its
    body) when it refused it, for the backend to convert. A failure on the way is the
    backend's error (``convert``), with the replica released and the connection dropped."""
    owner.stats.in_flight += 1
    resp: Response | None = None
    try:
        async with asyncio.timeout(first_byte_s):
            resp = await send()
            if resp.status < 400:
                stream = make(resp)
                await stream.prime()
                return stream, None, b""
            body = await resp.read()
    except BaseException as exc:
        owner.stats.in_flight -= 1
        release()
        if resp is not None:
            resp.close()
        err = None if isinstance(exc, asyncio.CancelledError) else owner.convert(exc)
        if err is None:
            raise
        raise err from None
    owner.stats.in_flight -= 1
    release()
    return None, resp, body


class StreamMeter:
    """Watches the events of one stream and reports into the backend's LiveStats.

    TTFT is the time to the first chunk that carries tokens; TPOT is the mean
    gap between token-bearing chunks after it (one chunk is about one token
    for every server we relay).
    """

    __slots__ = ("_stats", "_started", "_first", "_last", "_chunks", "usage", "ttft_s", "done",
                 "_finished")

    def __init__(self, stats: LiveStats) -> None:
        self._stats = stats
        self._started = time.perf_counter()
        self._first = 0.0
        self._last = 0.0
        self._chunks = 0
        self.usage: Usage | None = None
        self.ttft_s: float | None = None
        self.done = False
        self._finished = False

    def observe(self, event: SSEEvent) -> None:
        if event.done:
            self.done = True
            return
        if event.data is None:
            return
        usage = event.data.get("usage")
        if usage:
            self.usage = Usage.from_wire(usage)
        if event.has_tokens:
            now = time.perf_counter()
            if self._chunks == 0:
                self._first = now
                self.ttft_s = now - self._started
            self._last = now
            self._chunks += 1

    @property
    def tpot_s(self) -> float | None:
        if self._chunks < 2:
            return None
        return (self._last - self._first) / (self._chunks - 1)

    def finish(self) -> None:
        """Fold this stream's timings into the backend's smoothed stats, once."""
        if self._finished:
            return
        self._finished = True
        self._stats.requests += 1
        if self.ttft_s is not None:
            self._stats.observe_ttft(self.ttft_s)
        tpot = self.tpot_s
        if tpot is not None:
            self._stats.observe_tpot(tpot)


class MeteredStream:
    """What every backend's stream reports, read from its ``StreamMeter``."""

    _meter: StreamMeter
    _stats: LiveStats
    _closed: bool = False

    def _close_once(self) -> bool:
        """The first close leaves the backend's in-flight count and folds this
        stream's timings into its stats; later ones return False."""
        if self._closed:
            return False
        self._closed = True
        self._stats.in_flight -= 1
        self._meter.finish()
        return True

    @property
    def usage(self) -> Usage | None:
        return self._meter.usage

    @property
    def prompt_seen(self) -> Usage | None:
        return None          # OpenAI's protocol says the prompt's count with the output's

    @property
    def ttft_s(self) -> float:
        return self._meter.ttft_s or 0.0

    @property
    def tpot_s(self) -> float | None:
        return self._meter.tpot_s


class HTTPChunkStream(MeteredStream):
    """An upstream SSE stream, with its first event already read (so the
    gateway can still fall back before it sends anything to the client)."""

    def __init__(self, backend: StreamOwner, resp: Response,
                 meter: StreamMeter, replica: int = 0) -> None:
        self._backend = backend
        self._replica = replica       # which of the model's base_urls (backends/affinity.py)
        self._resp = resp
        self._meter = meter
        self._split = EventSplitter()
        self._pending: list[bytes] = []
        self._stats = backend.stats
        self._rename = backend.body_model

    @property
    def buffered(self) -> bool:
        return bool(self._pending)

    async def _read_events(self) -> bool:
        """Read until at least one whole event is pending; False at end of stream."""
        while not self._pending:
            chunk = await self._resp.readany()
            if not chunk:
                self._pending = self._split.flush()
                return bool(self._pending)
            self._pending = self._split.feed(chunk)
        return True

    async def prime(self) -> None:
        if not await self._read_events():
            raise UpstreamError(f"model {self._backend.name} closed the stream without data")

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        name = self._rename.name
        try:
            while True:
                if not self._pending:
                    async with asyncio.timeout(self._backend.between_s):
                        if not await self._read_events():
                            raise UpstreamError(
                                f"model {self._backend.name} ended the stream without [DONE]",
                                code="upstream_stream_truncated")
                event = SSEEvent.parse(self._pending.pop(0))
                data = event.data
                if data is not None and data.get("model", name) != name:
                    event = self._rename.event(event)
                self._meter.observe(event)
                yield event
                if event.done:
                    return
        except (TimeoutError, OSError) as exc:   # only network failures; a bug propagates
            err = self._backend.convert(exc, mid_stream=True)
            assert err is not None
            raise err from None

    async def aclose(self) -> None:
        if not self._close_once():
            return
        self._backend.affinity.release(self._replica)
        # Closing mid-stream drops the connection, which cancels the upstream request;
        # a finished stream returns its connection to the pool.
        try:
            if self._meter.done and not self._resp.done:  # [DONE] came; the body's end is due
                with contextlib.suppress(TimeoutError, OSError):
                    async with asyncio.timeout(1.0):
                        while await self._resp.readany():
                            pass
        finally:
            self._resp.release()   # reused if complete, else closed (even when cancelled here)
