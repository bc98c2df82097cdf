"""Bulk data in Redis within a per-team quota: stored responses, the response cache.

    store = QuotaStore(redis, tag_of, "resp")          # kind: one key family per use
    stored, used, count = await store.save("search", "resp_x", record, ttl_s=3600,
                                           max_bytes=1 << 28, max_count=100_000)
    await store.load("search", "resp_x")               # bytes or None
    await store.delete("search", "resp_x")             # True if it was there

With T = the team's hash tag and K the kind (keys in ``storage.redis_url``
when set, else the budget's Redis, which the quotas then keep bounded):

    T:K:<id>      STRING  the record                     (TTL)
    T:K:index     ZSET    id -> expiry (ms): what the quota counts
    T:K:sizes     HASH    id -> bytes
    T:K:usage     HASH    "bytes", "count": the team's records together

A save that would pass the quota is refused by the script itself,
atomically; expired records leave the counts as the next save or delete of
the team sweeps them (at most 256 a call). ``sizes`` says what is counted: a
save of an id already there replaces its bytes (a repeated cache write, two
identical misses at once) rather than adding them, and the sweep and delete
give back only what ``sizes`` still holds, once, whether or not the record
itself is still there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_SWEEP = """
-- An id counts while ``sizes`` holds it: give its bytes back once.
local function forget(id)
  local size = redis.call('HGET', KEYS[3], id)
  if size then
    redis.call('HDEL', KEYS[3], id)
    redis.call('HINCRBY', KEYS[4], 'bytes', -tonumber(size))
    redis.call('HINCRBY', KEYS[4], 'count', -1)
  end
end
local function sweep(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 256)
  for _, id in ipairs(gone) do
    redis.call('ZREM', KEYS[2], id)
    forget(id)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
sweep(now)
"""
# KEYS: record, index, sizes, usage. ARGV: record, ttl ms, max bytes, max count, id.
# Reply: {1 stored | 0 refused, bytes, count} (the team's usage after).
_SAVE = _SWEEP + """
local size, ttl = string.len(ARGV[1]), tonumber(ARGV[2])
local bytes = tonumber(redis.call('HGET', KEYS[4], 'bytes') or '0')
local count = tonumber(redis.call('HGET', KEYS[4], 'count') or '0')
-- Saved again (the same id): its new bytes replace the old, and it is still one record.
local old = redis.call('HGET', KEYS[3], ARGV[5])
local freed, added = tonumber(old or '0'), old and 0 or 1
if bytes - freed + size > tonumber(ARGV[3]) or count + added > tonumber(ARGV[4]) then
  return {0, bytes, count}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
redis.call('HSET', KEYS[3], ARGV[5], size)
redis.call('HINCRBY', KEYS[4], 'bytes', size - freed)
redis.call('HINCRBY', KEYS[4], 'count', added)
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ttl + 60000) end
return {1, bytes - freed + size, count + added}
"""
# KEYS: record, index, sizes, usage. ARGV: id. Reply: 1 if it was there.
_DELETE = _SWEEP + """
local found = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
forget(ARGV[1])
return found
"""


class QuotaStore:
    def __init__(self, redis: Any, tag_of: Callable[[str], str], kind: str) -> None:
        self._redis = redis
        self._tag_of = tag_of
        self.kind = kind
        self._save = redis.register_script(_SAVE)
        self._delete = redis.register_script(_DELETE)

    def key(self, team: str, record_id: str) -> str:
        return f"{self._tag_of(team)}:{self.kind}:{record_id}"

    def _keys(self, team: str, record_id: str) -> list[str]:
        tag = self._tag_of(team)
        return [self.key(team, record_id), f"{tag}:{self.kind}:index",
                f"{tag}:{self.kind}:sizes", f"{tag}:{self.kind}:usage"]

    async def save(self, team: str, record_id: str, record: bytes, *, ttl_s: float,
                   max_bytes: int, max_count: int) -> tuple[bool, int, int]:
        """(stored, the team's bytes, its records): refused when the quota would pass."""
        stored, used, count = await self._save(
            keys=self._keys(team, record_id),
            args=[record, int(ttl_s * 1000), max_bytes, max_count, record_id])
        return bool(stored), int(used), int(count)

    async def load(self, team: str, record_id: str) -> bytes | None:
        raw = await self._redis.get(self.key(team, record_id))
        return raw if raw is None or isinstance(raw, bytes) else str(raw).encode()

    async def delete(self, team: str, record_id: str) -> bool:
        return bool(await self._delete(keys=self._keys(team, record_id), args=[record_id]))
