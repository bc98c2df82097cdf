"""Small asyncio helpers every layer may use.

    while True:
        raise_if_cancelled()          # a loop that must end when its task is cancelled
        with contextlib.suppress(RedisError):
            await redis_call()

On Python 3.11, ``asyncio.wait_for`` (which redis-py uses for its socket
timeouts) can swallow a cancellation that arrives as the awaited call
completes: the call returns normally, and a ``while True`` loop that
suppresses errors never sees the ``CancelledError``. Its task then never
ends and whoever awaits it on shutdown hangs. ``Task.cancelling()`` still
counts the request, so a loop can check it on every turn.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelled() -> None:
    """Raise ``CancelledError`` if the current task was asked to stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
