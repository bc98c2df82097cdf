"""``/ui`` sessions: a random id in the cookie, its record in Redis for 12 hours.

    sid = await sessions.create("the admin key")    # -> the cookie's value
    await sessions.valid(sid)                       # True until it expires or ends
    await sessions.end(sid)                         # sign out: the old cookie opens nothing

The id is 256 random bits (``secrets``) and says nothing about the admin key.
Redis holds it only hashed, under the budget's ``key_prefix``, so reading
Redis does not hand out live sessions; the record's value is an HMAC of the
admin key it was opened with, so a changed admin key ends every session.
Every replica sharing the Redis sees the same sessions. When Redis fails, no
session is valid (the page asks to sign in again) and the admin API still
takes the key itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from typing import Any

from redis.exceptions import RedisError

from core.config import GatewayConfig
from core.errors import ServiceUnavailable
from gateway.auth import admin_key

log = logging.getLogger("routegate.sessions")
SESSION_S = 12 * 3600
CALL_TIMEOUT_S = 1.0
MAX_ID_CHARS = 64       # token_urlsafe(32) is 43; anything much longer is not ours


def key_fingerprint(key: str) -> bytes:
    """What a session remembers of the admin key: enough to notice it changed, nothing more."""
    return hmac.new(key.encode(), b"routegate-ui-session", hashlib.sha256).hexdigest().encode()


class UISessions:
    def __init__(self, redis: Any, config: GatewayConfig, *, ttl_s: int = SESSION_S) -> None:
        self._redis = redis
        self._config = config
        self._prefix = f"{config.budget.key_prefix}:ui-session:"
        self.ttl_s = ttl_s

    def _key(self, sid: str) -> str:
        return self._prefix + hashlib.sha256(sid.encode()).hexdigest()

    async def create(self, key: str) -> str:
        """A new session for someone who just gave the admin key ``key``."""
        sid = secrets.token_urlsafe(32)
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                await self._redis.set(self._key(sid), key_fingerprint(key), ex=self.ttl_s)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("cannot store a /ui session (%r)", exc)
            raise ServiceUnavailable("Sessions are unavailable; use the admin key as a bearer "
                                     "token meanwhile.") from None
        return sid

    async def valid(self, sid: str | None) -> bool:
        expected = admin_key(self._config)
        if not sid or len(sid) > MAX_ID_CHARS or expected is None:
            return False
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                stored = await self._redis.get(self._key(sid))
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("cannot read a /ui session (%r)", exc)
            return False
        return stored is not None and hmac.compare_digest(stored, key_fingerprint(expected))

    async def end(self, sid: str | None) -> None:
        if not sid or len(sid) > MAX_ID_CHARS:
            return
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                await self._redis.delete(self._key(sid))
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("cannot end a /ui session (%r); it expires by itself", exc)
