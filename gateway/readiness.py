"""``/readyz``'s probe of Redis and every upstream, at most once every few seconds.

    readiness = CachedProbe(lambda: probe_dependencies(gw), max_age_s=2.0)
    redis_ok, upstreams = await readiness.get()

``/readyz`` needs no key, so without a cache each request would call every
upstream's ``/models``: a flood of probes would multiply into upstream
traffic. A result is reused for ``max_age_s``; when it is stale, one probe
runs and every request that arrives meanwhile waits for that same probe.
A probe that raises is not kept: the next request probes again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from gateway.state import AppState

T = TypeVar("T")
READY_MAX_AGE_S = 2.0


class CachedProbe(Generic[T]):
    def __init__(self, probe: Callable[[], Awaitable[T]], max_age_s: float = READY_MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._probe = probe
        self._max_age_s = max_age_s
        self._clock = clock
        self._value: tuple[float, T] | None = None
        self._running: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._value is not None and self._clock() - self._value[0] < self._max_age_s:
            return self._value[1]
        if self._running is None:
            self._running = asyncio.ensure_future(self._run())
        # Shielded: a caller that goes away must not cancel the probe the others wait for.
        return await asyncio.shield(self._running)

    async def _run(self) -> T:
        try:
            value = await self._probe()
            self._value = (self._clock(), value)
            return value
        finally:
            self._running = None


async def probe_dependencies(gw: AppState) -> tuple[bool, dict[str, bool]]:
    """Whether Redis answers, and whether each model's upstream does."""
    names = list(gw.backends)
    results = await asyncio.gather(gw.redis_ready(), *(gw.backends[n].ready() for n in names))
    return bool(results[0]), dict(zip(names, (bool(r) for r in results[1:]), strict=True))
