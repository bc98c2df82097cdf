"""Responses that settle after the last byte is out.

The client never waits for the budget's Redis round trip or the telemetry
event, and a client that vanished mid-send is settled all the same: the
callback runs in ``finally``, shielded from cancellation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.responses import Response, StreamingResponse


class SettledResponse(Response):
    """A plain response is not cancelled when its client leaves, and the
    budget's settle shields itself (``BudgetStore.settle``), so no cancel
    scope is needed on this, the hottest path."""

    def __init__(self, *args: Any, on_sent: Callable[[], Awaitable[None]], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.on_sent = on_sent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.on_sent()


class _SettleAfterSend:
    on_sent: Callable[[], Awaitable[None]]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        finally:
            # A client that leaves cancels a stream's task group: shield the rest.
            with anyio.CancelScope(shield=True):
                await self.on_sent()


class SettledStreamingResponse(_SettleAfterSend, StreamingResponse):
    def __init__(self, *args: Any, on_sent: Callable[[], Awaitable[None]], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.on_sent = on_sent
