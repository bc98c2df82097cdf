"""Stored responses: one Redis key per response, under its team's hash tag, with a TTL.

    store = ResponseStore(redis, config)
    await store.save("search", response, conversation)   # True, or False: too big / Redis failed
    await store.load("search", "resp_…")                 # {"response": {...}, "messages": [...]}
    await store.delete("search", "resp_…")               # True if it was there

With T = ``{<budget.key_prefix>:<team>}`` (the budget's own tag, so a team's
keys share one Cluster slot):

    T:resp:<id>   STRING  {"response": <the response object>,
                           "messages": <the conversation as chat messages, this answer last>}
                  (TTL responses.store_ttl_s)

The team is part of the key, so another team's id is simply not found: no
ownership check can be forgotten. Each record holds the whole conversation,
so continuing it (``previous_response_id``) is one GET whatever the chain's
length. A record over ``responses.max_stored_bytes`` is not stored.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import orjson
from redis.exceptions import RedisError

from budget.keys import KeySpace
from core.config import GatewayConfig
from core.errors import ServiceUnavailable

log = logging.getLogger("routegate.responses")
CALL_TIMEOUT_S = 2.0
# Ids are ours ("resp_" and hex); anything else cannot name a stored response.
_ID = re.compile(r"^resp_[A-Za-z0-9]{1,96}$")


class ResponseStore:
    def __init__(self, redis: Any, config: GatewayConfig) -> None:
        self._redis = redis
        self._keys = KeySpace(config.budget.key_prefix, config.budget.timezone)
        self.ttl_s = config.responses.store_ttl_s
        self.max_bytes = config.responses.max_stored_bytes

    def key(self, team: str, response_id: str) -> str:
        return f"{self._keys.tag(team)}:resp:{response_id}"

    async def save(self, team: str, response: dict[str, Any],
                   messages: list[dict[str, Any]]) -> bool:
        """Store a response; False (and a log line) when it is too big or Redis failed.

        The answer was generated and billed either way: the client still gets
        it, saying ``"store": false``, rather than an error."""
        record = orjson.dumps({"response": response, "messages": messages})
        if len(record) > self.max_bytes:
            log.warning("response %s not stored: %d bytes is over responses.max_stored_bytes (%d)",
                        response["id"], len(record), self.max_bytes)
            return False
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                await self._redis.set(self.key(team, response["id"]), record, ex=self.ttl_s)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("response %s not stored (%r)", response["id"], exc)
            return False
        return True

    async def load(self, team: str, response_id: str) -> dict[str, Any] | None:
        """The stored record, or None; ServiceUnavailable when Redis cannot say."""
        if not _ID.match(response_id):
            return None
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                raw = await self._redis.get(self.key(team, response_id))
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("cannot read stored response %s (%r)", response_id, exc)
            raise ServiceUnavailable("Stored responses are unavailable right now; retry, or send "
                                     "the whole conversation as input.") from None
        return None if raw is None else orjson.loads(raw)

    async def delete(self, team: str, response_id: str) -> bool:
        if not _ID.match(response_id):
            return False
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return bool(await self._redis.delete(self.key(team, response_id)))
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("cannot delete stored response %s (%r)", response_id, exc)
            raise ServiceUnavailable("Stored responses are unavailable right now; retry.") from None
