"""Stored responses: one Redis key per response, under its team's hash tag, with a TTL,
within the team's quota.

    store = ResponseStore(redis, config)
    await store.save("search", response, conversation)   # True, or False: too big / full / failed
    store.check_room("search")                           # raises QuotaExceeded when known full
    await store.load("search", "resp_…")                 # {"response": {...}, "messages": [...]}
    await store.delete("search", "resp_…")               # True if it was there

With T = ``{<budget.key_prefix>:<team>}`` (the budget's own tag, so a team's
keys share one Cluster slot), in ``storage.redis_url`` when it is set:

    T:resp:<id>     STRING  {"response": <the response object>,
                             "messages": <the conversation as chat messages, this answer last>}
                    (TTL responses.store_ttl_s)
    T:resp:index    ZSET    id -> expiry (ms): what the quota counts
    T:resp:sizes    HASH    id -> bytes
    T:resp:usage    HASH    "bytes", "count": the team's stored responses together

The team is part of the key, so another team's id is simply not found: no
ownership check can be forgotten. Each record holds the whole conversation,
so continuing it (``previous_response_id``) is one GET whatever the chain's
length. A record over ``responses.max_stored_bytes`` is not stored. A save
that would pass the team's quota (``max_team_bytes``, ``max_team_count``) is
refused by the save script itself, atomically, and the team is then known
full on this replica: ``check_room`` refuses its ``store: true`` requests
before they run (looking again at most every ``RECHECK_S``), so none is
generated and billed only to be dropped. Expired records leave the counts
as the next save or delete of the team sweeps them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import orjson
from redis.exceptions import RedisError

from budget.keys import KeySpace
from core.config import GatewayConfig
from core.errors import QuotaExceeded, ServiceUnavailable
from gateway.bulk import QuotaStore

log = logging.getLogger("routegate.responses")
CALL_TIMEOUT_S = 2.0
RECHECK_S = 5.0          # a team known full is looked at again after this long
# Ids are ours ("resp_" and hex); anything else cannot name a stored response.
_ID = re.compile(r"^resp_[A-Za-z0-9]{1,96}$")

class ResponseStore:
    def __init__(self, redis: Any, config: GatewayConfig) -> None:
        self._keys = KeySpace(config.budget.key_prefix, config.budget.timezone)
        self._store = QuotaStore(redis, self._keys.tag, "resp")
        settings = config.responses
        self.ttl_s = settings.store_ttl_s
        self.max_bytes = settings.max_stored_bytes
        self.team_bytes, self.team_count = settings.max_team_bytes, settings.max_team_count
        self._full: dict[str, float] = {}     # team -> when it was found full (monotonic)

    def key(self, team: str, response_id: str) -> str:
        return self._store.key(team, response_id)

    def check_room(self, team: str) -> None:
        """Refuse a ``store: true`` request of a team known full (no round trip)."""
        since = self._full.get(team)
        if since is None:
            return
        if time.monotonic() - since > RECHECK_S:
            del self._full[team]     # let one through: its save says whether there is room
            return
        raise QuotaExceeded(
            f"Team '{team}' has used its stored-responses quota ({self.team_bytes} bytes or "
            f"{self.team_count} responses): delete stored responses, send \"store\": false, "
            "or ask an admin to raise responses.max_team_bytes / max_team_count.",
            code="stored_responses_quota", headers={"x-should-retry": "false"})

    async def save(self, team: str, response: dict[str, Any],
                   messages: list[dict[str, Any]]) -> bool:
        """Store a response; False (and a log line) when it is too big, the team's
        quota is full, or Redis failed.

        The answer was generated and billed either way: the client still gets
        it, saying ``"store": false``, rather than an error."""
        record = orjson.dumps({"response": response, "messages": messages})
        if len(record) > self.max_bytes:
            log.warning("response %s not stored: %d bytes is over responses.max_stored_bytes (%d)",
                        response["id"], len(record), self.max_bytes)
            return False
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                stored, used, count = await self._store.save(
                    team, response["id"], record, ttl_s=self.ttl_s, max_bytes=self.team_bytes,
                    max_count=self.team_count)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("response %s not stored (%r)", response["id"], exc)
            return False
        if not stored:
            self._full[team] = time.monotonic()
            log.warning("response %s not stored: team %s is at its quota (%s bytes, %s "
                        "responses)", response["id"], team, used, count)
        else:
            self._full.pop(team, None)
        return bool(stored)

    async def load(self, team: str, response_id: str) -> dict[str, Any] | None:
        """The stored record, or None; ServiceUnavailable when Redis cannot say."""
        if not _ID.match(response_id):
            return None
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                raw = await self._store.load(team, response_id)
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
                found = await self._store.delete(team, response_id)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("cannot delete stored response %s (%r)", response_id, exc)
            raise ServiceUnavailable("Stored responses are unavailable right now; retry.") from None
        if found:
            self._full.pop(team, None)
        return bool(found)
