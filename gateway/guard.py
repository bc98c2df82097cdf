"""Slowing down guesses at the admin key: failed attempts per client address, in Redis.

    guard = AdminGuard(redis, config)
    await guard.check("203.0.113.9", "sk-guess")   # AuthenticationFailed, RateLimited, or passes

Every place that takes the admin key (``/admin/*``, ``/metrics`` when it is
protected, ``/ui/login``) goes through ``check``. A wrong key counts one
failure against the client's address in a fixed window shared by every
replica (one Redis key, one round trip: ``_COUNT``). From ``MAX_FAILURES``
failures in a window on, that address gets 429 with ``retry-after`` until the
window ends, whatever it sends: refusing only the wrong keys would still let
a right guess in. A request with no key at all is not a guess and is not counted.

The address is the TCP peer's: ``x-forwarded-for`` is believed only from the
proxies ``serve --trusted-proxies`` names (uvicorn rewrites the peer then), so a
client cannot rotate it to guess without limit. Behind a proxy not named there
every client shares the proxy's address, and one guesser locks out the rest
until the window ends. If Redis fails, the key is
still checked but not counted (and a warning logged): an outage must not
lock operators out of ``/metrics`` and the admin API when they need them most.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from redis.exceptions import RedisError

from core.config import GatewayConfig
from core.errors import AuthenticationFailed, RateLimited
from gateway.auth import admin_key, closing, key_equals

log = logging.getLogger("routegate.guard")
MAX_FAILURES = 10
WINDOW_S = 60
CALL_TIMEOUT_S = 1.0

# KEYS[1]: the address's failure count. ARGV[1]: 1 if this attempt failed.
# ARGV[2]: the window (ms), set when the window's first failure creates the key.
# Returns the count and its time to live (ms; negative when there is none).
_COUNT = """
local n
if ARGV[1] == '1' then
  n = redis.call('INCR', KEYS[1])
  if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
else
  n = tonumber(redis.call('GET', KEYS[1]) or '0')
end
return {n, redis.call('PTTL', KEYS[1])}
"""


def denied() -> AuthenticationFailed:
    return AuthenticationFailed("This endpoint needs the admin key.", code="invalid_admin_key",
                                headers=closing())


class AdminGuard:
    def __init__(self, redis: Any, config: GatewayConfig, *, max_failures: int = MAX_FAILURES,
                 window_s: int = WINDOW_S) -> None:
        self._count = redis.register_script(_COUNT)
        self._config = config
        self._prefix = f"{config.budget.key_prefix}:admin-failures:"
        self.max_failures = max_failures
        self.window_s = window_s

    async def check(self, client: str, presented: str | None) -> None:
        """Pass if ``presented`` is the admin key and ``client`` is not throttled."""
        if not presented:
            raise denied()
        expected = admin_key(self._config)
        ok = expected is not None and key_equals(presented, expected)
        failures, ttl_ms = await self._record(client, failed=not ok)
        if failures > self.max_failures or (ok and failures >= self.max_failures):
            retry_s = math.ceil(ttl_ms / 1000) if ttl_ms > 0 else self.window_s
            raise RateLimited(f"Too many wrong admin keys from this address; try again in "
                              f"{retry_s} s.", headers={"retry-after": str(retry_s), **closing()})
        if not ok:
            raise denied()

    async def _record(self, client: str, *, failed: bool) -> tuple[int, int]:
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                failures, ttl_ms = await self._count(
                    keys=[self._prefix + client], args=[int(failed), self.window_s * 1000])
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("admin-key throttle unavailable (%r): checking the key without it", exc)
            return 0, 0
        return int(failures), int(ttl_ms)
