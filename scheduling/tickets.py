"""What a model's scheduler (``scheduling/scheduler.py``) keeps per request and per pool."""

from __future__ import annotations

import asyncio
import time
from collections import deque

from core.types import LiveStats


class Ticket:
    """One admitted request: what its release needs to learn from it."""

    __slots__ = ("lane", "prompt_tokens", "ahead", "started", "released", "learned")

    def __init__(self, lane: Lane, prompt_tokens: int, ahead: float, started: float) -> None:
        self.lane = lane
        self.prompt_tokens = prompt_tokens
        self.ahead = ahead            # prefill backlog (tokens) this prompt joined
        self.started = started
        self.released = False
        self.learned = False

    def learn_prefill(self, stats: LiveStats, ttft_s: float) -> None:
        """The backlog ahead and the prompt were prefilled in ``ttft_s``: once, as
        soon as it is known (a stream's first token, not its end, seconds later)."""
        if not self.learned:
            self.learned = True
            stats.observe_prefill(self.ahead + self.prompt_tokens, ttft_s)


class Waiter:
    __slots__ = ("future", "prompt_tokens", "since")

    def __init__(self, future: asyncio.Future[Ticket], prompt_tokens: int) -> None:
        self.future = future
        self.prompt_tokens = prompt_tokens
        self.since = time.monotonic()


class Lane:
    """One pool's share of a model: how many run, and who waits (FIFO)."""

    __slots__ = ("pool", "in_flight", "queued", "max_queue", "wait_s", "waiters")

    def __init__(self, pool: str, max_queue: int, wait_s: float) -> None:
        self.pool = pool
        self.in_flight = 0
        self.queued = 0
        self.max_queue = max_queue
        self.wait_s = wait_s
        self.waiters: deque[Waiter] = deque()
