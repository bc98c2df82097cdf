"""A ``ChunkStream`` that holds its scheduler slot until it is closed
(``PoolScheduler.holding``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from backends.base import WrappedStream
from core.errors import GatewayError
from core.types import LiveStats
from scheduling.tickets import Ticket

if TYPE_CHECKING:
    from backends.base import ChunkStream
    from backends.sse import SSEEvent


class SlotHolder(Protocol):
    """What a held stream needs of its scheduler (``PoolScheduler``)."""

    stats: LiveStats

    def release(self, ticket: Ticket, *, failed: BaseException | None = None,
                ttft_s: float | None = None) -> None: ...


class ScheduledStream(WrappedStream):
    """A ``ChunkStream`` that holds its scheduler slot until it is closed."""

    def __init__(self, scheduler: SlotHolder, ticket: Ticket, stream: ChunkStream) -> None:
        super().__init__(stream)
        self._scheduler = scheduler
        self._ticket = ticket
        self._failed: BaseException | None = None

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        ticket, stats = self._ticket, self._scheduler.stats
        try:
            async for event in self._stream:
                if not ticket.learned and (ttft := self._stream.ttft_s):
                    ticket.learn_prefill(stats, ttft)   # the prefill rate, without the decode
                yield event
        except GatewayError as exc:
            self._failed = exc
            raise

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._scheduler.release(self._ticket, failed=self._failed,
                                    ttft_s=self._stream.ttft_s or None)

    def __del__(self) -> None:
        # A stream dropped unclosed (a response that failed before its first
        # send, say) must not keep its slot for ever.
        if not self._ticket.released:
            try:
                self._scheduler.release(self._ticket)
            except RuntimeError:   # the event loop is gone: so is the scheduler
                pass
